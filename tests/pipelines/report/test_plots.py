import warnings

from bertstream.pipelines.report import plots


def test_tokens_in_scripts_the_font_lacks_warn_nothing(tmp_path):
    """Chinese tokens drew a 'Glyph ... missing from font' warning per character in tight_layout: 29 lines of
    Python warnings around the report's one line on a Chinese dataset."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = plots.top_tokens({"top_tokens": [("的", 30.0), ("是", 20.0), ("🙂", 5.0)]}, str(tmp_path))
    assert (tmp_path / fig.file).stat().st_size > 0
