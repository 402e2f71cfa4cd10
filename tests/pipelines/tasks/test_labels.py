import pytest

from bertstream.pipelines.common.files import InputError
from bertstream.pipelines.tasks.kind import MAX_LABELS
from bertstream.pipelines.tasks.labels import finish_derived


def test_a_derived_label_set_is_sorted_with_the_kinds_labels():
    assert finish_derived(["pos", "neg", "pos"], always=("O",)) == ["O", "neg", "pos"]


def test_more_derived_labels_than_an_id_holds_is_one_line():
    """200,000 distinct labels (a text column read as the label) ended in pyarrow's 'Value 111112 too large to
    fit in C integer type' with a details log; one line naming the count and the cap now."""
    assert len(finish_derived(map(str, range(MAX_LABELS)))) == MAX_LABELS
    with pytest.raises(InputError, match=f"{MAX_LABELS + 1:,} distinct labels, more than a label id holds"):
        finish_derived(map(str, range(MAX_LABELS + 1)))
