"""Config dataclasses as the one source of CLI flags: each field's default, help, flag name and choices live on
the field (``opt``), and :func:`click_options` turns a config class into click options, :func:`build` turns
the parsed (flat) values back into the nested config.

A config class holds leaf fields and sections (fields declared with :func:`section`, one level deep). Leaf
names are unique across a config, so a flat ``name -> value`` view (:func:`flat`) names every setting by its
leaf (the flag's name, but where a field sets its flag: the trainer's ``mlm_probability`` is
``--masked-lm-prob``, as the pipeline and the manifest call it); that view also reads configs saved by the
flat layout of earlier versions
(:func:`saved_values`). A command that needs another default than the section's gives it once, in
``section(Cls, name=value)``. A component's config used as a section may hold settings that belong to
another part of the command (the loader's batch size is the run's ``--batch-size``): ``section(Cls,
linked=(name, ...))`` fills those fields from the leaf of that name elsewhere in the config; they get no flag
of their own and are saved once, where their leaf is.

Each setting also says what it is, once, on its field: ``opt(..., tags=(FIXED, ARCH))``. What other code keeps
as a list is read from the tags (:func:`tagged`): the settings a resume keeps (:data:`FIXED`), the architecture
a checkpoint or ``--init-from`` gives (:data:`ARCH`), what static masking leaves at its default
(:data:`DYNAMIC`), the parameters recorded in the shards (:data:`RECORDED`, :data:`RECORDED_WHEN_SET`: only when
not the default, so that shards written without it keep their bytes). A command line also says which settings
the user gave (:func:`given_names`): a resumed run takes the others from its checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

import click

from bertstream.cli.errors import UsageError

# What a setting is (``opt(tags=...)``), read by the code that used to keep its own list of names.
FIXED = "fixed on resume"  # shapes the run's trajectory: a resume keeps it (``trainer.pretrain.resume``)
ARCH = "architecture"  # the model's shape: a resumed run's checkpoint or --init-from gives it
DYNAMIC = "dynamic masking only"  # static masks are the shards' own: static masking leaves it at its default
RECORDED = "recorded in the shards"  # shapes the rows: in every shard's parameters (``shard_parameters``)
RECORDED_WHEN_SET = "recorded in the shards when set"  # likewise, but only when not the default (older bytes)
PER_NODE = "may differ between nodes"  # where a process computes and how it reads: ranks need not agree on it
EVALUATION = "evaluation only"  # read only when there is eval data to evaluate: typed without any, refused
TAGS = (FIXED, ARCH, DYNAMIC, RECORDED, RECORDED_WHEN_SET, PER_NODE, EVALUATION)

# Saved configs of earlier versions named these leaves differently (flat ones: before sections).
# The largest integer a setting may hold: what torch, numpy, Arrow and the tokenizers library take (--seed 2**70
# was "Overflow when unpacking long long", --min-frequency 1e20 an OverflowError from the tokenizers library).
MAX_INT = (1 << 63) - 1
_RENAMED = {"data": "paths", "sources": "paths", "data_format": "format", "model": "preset"}
# One flag per setting in every command line; each of these also answers to the other names it had. The
# masking settings take the names the manifest records (Google's); the trainer called them otherwise.
ALIASES: dict[str, tuple[str, ...]] = {
    "--masked-lm-prob": ("--mlm-probability",),
    "--max-predictions-per-seq": ("--max-predictions",),
}


def opt(
    default: Any = MISSING,
    help: str | None = None,
    *,
    flag: str | None = None,
    choices: tuple[str, ...] | None = None,
    negate: bool = False,
    path: str | None = None,
    exists: bool = True,
    show: bool = False,
    after: str | None = None,
    convert: Callable[[str | None], Any] | None = None,
    cli: bool = True,
    tags: tuple[str, ...] = (),
    only_with: tuple[str, Any] | None = None,
) -> Any:
    """A config field with its CLI metadata. ``flag``: the flag when it is not ``--field-name`` (a pair
    ``--lowercase/--cased`` for a bool that may also be None: not given); ``negate``: a bool field set False
    by the flag (``--no-tensorboard``, ``--keep-gutenberg``); ``path``: ``"file"`` or ``"dir"``, which must
    exist unless ``exists=False``; ``show``: ``[default: ...]`` in ``--help`` (commands without
    ``show_default``); ``after``: listed in ``--help`` right after that leaf, not in declaration order;
    ``convert``: the flag takes text, which this turns into the field's value (its :class:`UsageError` a
    usage error of the flag); ``cli=False``: a setting without a flag (config and tests only); ``tags``: what the
    setting is (:data:`TAGS`); ``only_with=(NAME, VALUE)``: the setting applies only while setting NAME has VALUE
    (:func:`check_only_with` refuses it otherwise; a recorded one is recorded only then)."""
    unknown = [t for t in tags if t not in TAGS]
    assert not unknown, f"unknown tags {unknown}: one of {TAGS}"
    meta = {
        "help": help,
        "flag": flag,
        "choices": choices,
        "negate": negate,
        "path": path,
        "exists": exists,
        "show": show,
        "after": after,
        "convert": convert,
        "cli": cli,
        "tags": frozenset(tags),
        "only_with": only_with,
    }
    return field(default=default, metadata=meta)


def with_tags(declared: Any, *tags: str) -> Any:
    """A field made by another module's ``opt`` (``--format``, declared once for every job) with ``tags``
    added for this config."""
    meta = {**declared.metadata, "tags": declared.metadata.get("tags", frozenset()) | frozenset(tags)}
    return field(default=declared.default, metadata=meta)


def section(
    cls: type,
    *,
    help: Mapping[str, str | None] | None = None,
    after: dict[str, str] | None = None,
    choices: dict[str, tuple[str, ...]] | None = None,
    linked: tuple[str, ...] = (),
    tags: dict[str, tuple[str, ...]] | None = None,
    **defaults: Any,
) -> Any:
    """A field holding the section ``cls``; ``defaults`` (and ``help``, ``after``: the leaf a flag is listed
    after in ``--help``, ``choices``: some of the field's own, which :func:`check_choices` holds a config to)
    override the section's own for this config only, ``tags`` add to a leaf's for this config only (one command's
    resume keeps a setting another's lets change); ``linked`` fields take the value of the config's leaf of that
    name (see the module's docstring). Sections without required fields get a default instance."""
    names = {f.name for f in fields(cls)}
    unknown = [n for n in (*defaults, *linked, *(after or {}), *(choices or {}), *(tags or {})) if n not in names]
    assert not unknown, f"{cls.__name__} has no field {', '.join(unknown)}"
    own = {f.name: f.metadata.get("choices") or () for f in fields(cls)}
    wider = [n for n, c in (choices or {}).items() if own[n] and not set(c) <= set(own[n])]  # (none: any value)
    assert not wider, f"choices of {', '.join(wider)} beyond {cls.__name__}'s own"
    bad = [t for added in (tags or {}).values() for t in added if t not in TAGS]
    assert not bad, f"unknown tags {bad}: one of {TAGS}"
    meta = {
        "section": cls,
        "defaults": defaults,
        "help": dict(help or {}),
        "after": after or {},
        "choices": choices or {},
        "linked": tuple(linked),
        "tags": {name: frozenset(added) for name, added in (tags or {}).items()},
    }
    # a default of MISSING makes the leaf required in this config only (fine-tuning's --eval-data)
    required = any(
        defaults.get(f.name, f.default) is MISSING and (f.name in defaults or f.default_factory is MISSING)
        for f in fields(cls)
        if f.name not in linked
    )
    if required:
        return field(metadata=meta)
    return field(default_factory=functools.partial(cls, **defaults), metadata=meta)


@dataclass(frozen=True, slots=True)
class Leaf:
    """One setting of a config: where it lives (``section`` None: on the config itself) and its effective
    default and help."""

    name: str
    section: str | None
    field: Field
    type: Any
    default: Any
    help: str | None
    after: str | None = None  # listed in --help right after this leaf
    choices: tuple[str, ...] | None = None  # the values the flag takes (a section may offer fewer than its field)
    added: frozenset[str] = frozenset()  # tags its section adds for this config (``section(..., tags=...)``)

    @property
    def meta(self) -> Any:
        return self.field.metadata

    @property
    def flag(self) -> str:
        return self.meta.get("flag") or "--" + self.name.replace("_", "-")

    @property
    def tags(self) -> frozenset[str]:
        return self.meta.get("tags", frozenset()) | self.added

    @property
    def flags(self) -> tuple[str, ...]:
        """The flag and its aliases (:data:`ALIASES`), as click takes and ``--help`` lists them."""
        return (self.flag, *ALIASES.get(self.flag, ()))


def leaves(cls: type) -> Iterator[Leaf]:
    """Every leaf setting of config class ``cls``, in declaration order (sections expanded in place)."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if f.metadata.get("given"):
            continue  # (the record of what was given, not a setting)
        sec = f.metadata.get("section")
        if sec is None:
            meta = f.metadata
            yield Leaf(
                f.name, None, f, hints[f.name], f.default, meta.get("help"), meta.get("after"), meta.get("choices")
            )
            continue
        sec_hints = typing.get_type_hints(sec)
        for g in fields(sec):
            if g.name in f.metadata["linked"]:
                continue  # the leaf of that name elsewhere in the config holds it
            default = f.metadata["defaults"].get(g.name, g.default)
            help_ = f.metadata["help"].get(g.name, g.metadata.get("help"))
            after = f.metadata["after"].get(g.name, g.metadata.get("after"))
            choices = f.metadata["choices"].get(g.name, g.metadata.get("choices"))
            added = f.metadata.get("tags", {}).get(g.name, frozenset())
            yield Leaf(g.name, f.name, g, sec_hints[g.name], default, help_, after, choices, added)


def tagged(cls: type, tag: str) -> tuple[str, ...]:
    """The leaf names of ``cls`` that carry ``tag``, in declaration order."""
    return tuple(leaf.name for leaf in leaves(cls) if tag in leaf.tags)


def defaults(cls: type, tag: str) -> dict[str, Any]:
    """``name -> default`` of the leaves of ``cls`` that carry ``tag``."""
    return {leaf.name: leaf.default for leaf in leaves(cls) if tag in leaf.tags}


def recorded(cfg: Any) -> dict[str, Any]:
    """``name -> value`` of ``cfg``'s settings recorded in the shards: each :data:`RECORDED` one, and each
    :data:`RECORDED_WHEN_SET` one whose value is not its default."""
    out = {}
    now = flat(cfg)
    for leaf in leaves(type(cfg)):
        value, only_with = now[leaf.name], leaf.meta.get("only_with")
        if only_with is not None and now[only_with[0]] != only_with[1]:
            continue
        if RECORDED in leaf.tags or (RECORDED_WHEN_SET in leaf.tags and value != leaf.default):
            out[leaf.name] = value
    return out


def check_only_with(cfg: Any) -> None:
    """Each setting of ``cfg`` declared ``only_with=(NAME, VALUE)`` is at its default unless NAME has VALUE: a
    value the run would ignore, yet record as its setting, is refused (every argument is used or refused)."""
    now, cls = flat(cfg), type(cfg)
    for leaf in leaves(cls):
        only_with = leaf.meta.get("only_with")
        if only_with is not None and now[only_with[0]] != only_with[1] and now[leaf.name] != leaf.default:
            other, wanted = flag_for(cls, only_with[0]), only_with[1]
            raise UsageError(
                leaf.name, f"only applies with {other} {wanted} (this run has {other} {now[only_with[0]]})"
            )


def check_choices(cfg: Any) -> None:
    """Each setting of ``cfg`` with choices holds one of them: those its section offers in this config
    (``section(..., choices=...)``, fewer than the section's class checks), as the flag's click.Choice does on a
    command line, for a config built in code or read from a file."""
    now = flat(cfg)
    for leaf in leaves(type(cfg)):
        value = now[leaf.name]
        if leaf.choices and isinstance(value, str) and value not in leaf.choices:
            raise UsageError(leaf.name, f"must be one of {leaf.choices}, got {value!r}")


def given_field() -> Any:
    """A config's record of the settings its command line gave (:func:`given_names`; None: built in code, where
    a setting at its default counts as not given). Not a setting: no flag, not saved, not compared."""
    return field(default=None, compare=False, metadata={"given": True})


def given_names(ctx: click.Context, cls: type) -> frozenset[str]:
    """The leaves of ``cls`` the user gave to the command of ``ctx``: on its command line (or in the
    environment), or from ``--config FILE`` where the file's value is not the default."""
    from click.core import ParameterSource

    by_param = {f"no_{leaf.name}" if leaf.meta.get("negate") else leaf.name: leaf for leaf in leaves(cls)}
    out = set()
    for name, leaf in by_param.items():
        source = ctx.get_parameter_source(name)
        if source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT, ParameterSource.PROMPT):
            out.add(leaf.name)
        elif source == ParameterSource.DEFAULT_MAP:
            value = ctx.params.get(name)
            if (not value if leaf.meta.get("negate") else value) != leaf.default:
                out.add(leaf.name)
    return frozenset(out)


def given(cfg: Any) -> frozenset[str]:
    """The leaves of ``cfg`` its user gave: its command line's record, or for a config built in code (no
    record) the leaves whose value is not their default."""
    record = getattr(cfg, "given", None)
    if record is not None:
        return frozenset(record)
    now = flat(cfg)
    return frozenset(leaf.name for leaf in leaves(type(cfg)) if now[leaf.name] != leaf.default)


def _base_type(tp: Any) -> tuple[Any, bool]:
    """(click type of one value, multiple) for a field annotation."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is tuple:
        return typing.get_args(tp)[0], True
    return tp, False


def _converted(convert: Callable[[str | None], Any]) -> Callable:
    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        try:
            return convert(value)
        except UsageError as e:
            raise click.BadParameter(e.message) from None

    return callback


def _dropped_default(leaf: Leaf) -> bool:
    """A default outside the field's choices (``""``: none chosen) is not click's: the flag reads None."""
    choices = leaf.choices or ()
    return bool(choices) and leaf.default not in (MISSING, None) and leaf.default not in choices


class SingleOption(click.Option):
    """An option that takes one value and refuses a second: click keeps the last of ``--seed 1 --seed 2``
    (last-wins), so a copied command line with an appended ``--output b`` would write where the user did not
    look. The parser is told to collect every occurrence (``append`` for ``store``); two different values are a
    usage error naming the flag (the same value twice is that value). Both sides of an on/off pair
    (``--lowercase --cased``) are two values of one option. Options that take
    several values (``multiple``, ``count``) are click's own."""

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        super().add_to_parser(parser, ctx)
        if self.multiple or self.count:
            return
        # click's parser has no hook for "seen twice": its per-flag records (private, stable since click 7) are
        # switched from keeping the last value to keeping them all, which consume_value below unwraps.
        for record in {*parser._long_opt.values(), *parser._short_opt.values()}:
            if record.obj is self and record.action in ("store", "store_const"):
                record.action = "append" if record.action == "store" else "append_const"

    def consume_value(self, ctx: click.Context, opts: Any) -> Any:
        given = opts.get(self.name)
        if isinstance(given, list) and not self.multiple and not self.count:
            if any(v != given[0] for v in given):  # the same value twice is one value (a flag typed twice)
                if self.secondary_opts:
                    told = f"{' and '.join(self.opts + self.secondary_opts)} are both given: give one of them"
                else:
                    told = f"{self.opts[0]} is given {len(given)} times ({', '.join(map(repr, given))}): give it once"
                raise click.BadOptionUsage(
                    self.name or self.opts[0], f"{told} (a later one would not replace an earlier one)", ctx=ctx
                )
            opts = {**opts, self.name: given[0]}
        return super().consume_value(ctx, opts)


def single_option(*decls: str, **kw: Any) -> Callable:
    """``click.option`` for a command's own flags outside a config (``bertprep report --output``): one value,
    refused when given twice (:class:`SingleOption`)."""
    return click.option(*decls, cls=SingleOption, **kw)


def _option(leaf: Leaf) -> Callable:
    meta = leaf.meta
    kw: dict[str, Any] = {"help": leaf.help, "cls": SingleOption}
    if meta.get("show"):
        kw["show_default"] = True
    if meta.get("convert"):
        return click.option(*leaf.flags, leaf.name, callback=_converted(meta["convert"]), **kw)
    base, multiple = _base_type(leaf.type)
    if base is bool:
        kw["is_flag"] = True
        if "/" in leaf.flag:  # an on/off pair: its default (None: neither given) is the field's
            kw["default"] = leaf.default
        name = f"no_{leaf.name}" if meta.get("negate") else leaf.name
        return click.option(*leaf.flags, name, **kw)
    if leaf.choices:
        kw["type"] = click.Choice(list(leaf.choices))
    elif meta.get("path"):
        kw["type"] = click.Path(
            exists=meta.get("exists", True), dir_okay=meta["path"] != "file", file_okay=meta["path"] != "dir"
        )
    elif base is not str:
        kw["type"] = base
    if multiple:
        kw["multiple"] = True
    if leaf.default is MISSING:
        kw["required"] = True
    elif leaf.default is not None and not _dropped_default(leaf):
        kw["default"] = leaf.default
    return click.option(*leaf.flags, leaf.name, **kw)


def _help_order(cls: type) -> list[Leaf]:
    """The leaves with a flag, in declaration order but each ``after=NAME`` one right after ``NAME``."""
    listed = [leaf for leaf in leaves(cls) if leaf.meta.get("cli", True)]
    order = [leaf for leaf in listed if not leaf.after]
    pending = [leaf for leaf in listed if leaf.after]
    while pending:  # each in declaration order, once its NAME is listed (NAME may be listed after another)
        leaf = next(p for p in pending if any(x.name == p.after for x in order))
        at = next(i for i, x in enumerate(order) if x.name == leaf.after)
        order.insert(at + 1, leaf)
        pending.remove(leaf)
    return order


def click_options(cls: type) -> Callable[[Callable], Callable]:
    """Decorate a click command with one option per leaf of ``cls`` (in declaration order in ``--help``)."""

    def decorate(command: Callable) -> Callable:
        for leaf in reversed(_help_order(cls)):
            command = _option(leaf)(command)
        return command

    return decorate


def build(cls: type, **values: Any) -> Any:
    """The nested config ``cls`` from flat leaf values (click's kwargs, or keyword arguments in tests); a
    negated flag's ``no_NAME`` is read as ``NAME = not value``; sequences become tuples."""
    values = dict(values)
    record = {f.name: values.pop(f.name) for f in fields(cls) if f.metadata.get("given") and f.name in values}
    for leaf in leaves(cls):
        if leaf.meta.get("negate") and f"no_{leaf.name}" in values:
            values[leaf.name] = not values.pop(f"no_{leaf.name}")
    top: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {}
    for leaf in leaves(cls):
        if leaf.name not in values:
            continue
        value = values.pop(leaf.name)
        if value is None and _dropped_default(leaf):
            continue
        if _base_type(leaf.type)[1] and value is not None:
            value = tuple(value)
        _check_int_range(leaf, value)
        (top if leaf.section is None else parts.setdefault(leaf.section, {}))[leaf.name] = value
    if values:
        raise TypeError(f"{cls.__name__} has no setting {', '.join(sorted(values))}")
    for f in fields(cls):
        sec = f.metadata.get("section")
        if sec is not None and (f.name in parts or f.default_factory is MISSING or f.metadata["linked"]):
            given = {k: v for k, v in f.metadata["defaults"].items() if v is not MISSING} | parts.get(f.name, {})
            top[f.name] = sec(**given, **_linked_values(cls, f, top, parts))
    return cls(**top, **record)


def _check_int_range(leaf: Leaf, value: Any) -> None:
    """Every integer setting of every command fits in 64 bits (a setting's own range is checked by its class)."""
    base, _ = _base_type(leaf.type)
    for v in value if isinstance(value, tuple) else (value,):
        if base is int and isinstance(v, int) and not isinstance(v, bool) and not -MAX_INT - 1 <= v <= MAX_INT:
            bound = "at most 2**63 - 1" if v > 0 else "at least -2**63"
            raise UsageError(leaf.name, f"must be {bound}, got {v!r}")


def _linked_values(cls: type, f: Field, top: dict[str, Any], parts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The values of section field ``f``'s linked settings: each leaf's given value, else its default."""
    out: dict[str, Any] = {}
    for leaf in leaves(cls):
        if leaf.name in f.metadata["linked"]:
            given = top if leaf.section is None else parts.get(leaf.section, {})
            value = given.get(leaf.name, leaf.default)
            if value is not MISSING:
                out[leaf.name] = value
    return out


def check_linked(cfg: Any) -> None:
    """Each linked field of ``cfg``'s sections holds its leaf's value (a config built by hand must agree with
    itself as :func:`build` makes it)."""
    now = flat(cfg)
    for f in fields(cfg):
        for name in f.metadata.get("linked", ()):
            mine = getattr(getattr(cfg, f.name), name)
            if mine != now[name]:
                raise UsageError(name, f"{f.name}.{name} is {mine!r} but the config's {name} is {now[name]!r}")


def flag_for(cls: type, param: str) -> str:
    """The flag a user typed for field ``param`` of ``cls`` (a :class:`UsageError`'s), as ``--help`` lists
    it; of an on/off pair, the one away from the default (``--no-header``)."""
    for leaf in leaves(cls):
        if leaf.name == param and leaf.meta.get("cli", True):
            on, _, off = leaf.flag.partition("/")
            return off if off and leaf.default else on
        if leaf.name == param and leaf.meta.get("flag"):  # a field set through another flag (weights: --data)
            return str(leaf.meta["flag"])
    return "--" + param.replace("_", "-")


def bad_parameter(cls: type | None, err: UsageError) -> click.BadParameter:
    """``err`` as click's usage error (exit 2) naming the flag of ``cls`` it came from (and its aliases, as
    click's own errors do)."""
    flag = flag_for(cls, err.param) if cls is not None else "--" + err.param.replace("_", "-")
    return click.BadParameter(err.message, param_hint=" / ".join(f"'{f}'" for f in (flag, *ALIASES.get(flag, ()))))


def flat(cfg: Any) -> dict[str, Any]:
    """``leaf name -> value`` of a config instance."""
    out: dict[str, Any] = {}
    for leaf in leaves(type(cfg)):
        holder = cfg if leaf.section is None else getattr(cfg, leaf.section)
        out[leaf.name] = getattr(holder, leaf.name)
    return out


def to_dict(cfg: Any) -> dict[str, Any]:
    """The nested config as JSON-ready values (tuples as lists), as saved with checkpoints."""

    def plain(value: Any, linked: tuple[str, ...] = ()) -> Any:
        if dataclasses.is_dataclass(value):
            return {
                f.name: plain(getattr(value, f.name), f.metadata.get("linked", ()))
                for f in fields(value)
                if f.name not in linked and not f.metadata.get("given")
            }
        return list(value) if isinstance(value, tuple) else value

    return plain(cfg)


def saved_values(cls: type, saved: dict[str, Any]) -> dict[str, Any]:
    """``leaf name -> value`` of a saved config of ``cls``: the nested layout, or the flat one of checkpoints
    written before sections (keys renamed since are mapped; unknown keys dropped)."""
    names = {leaf.name for leaf in leaves(cls)}
    linked = {f.name: f.metadata["linked"] for f in fields(cls) if "section" in f.metadata}
    out: dict[str, Any] = {}
    for key, value in saved.items():
        if key in linked and isinstance(value, dict):  # (flat layouts hold no dict values)
            for k, v in value.items():
                k = _RENAMED.get(k, k)
                if k in names and k not in linked[key]:
                    out[k] = v
        elif _RENAMED.get(key, key) in names:
            out[_RENAMED.get(key, key)] = value
    return out


def saved_leaf(saved: dict[str, Any], name: str, default: Any = None) -> Any:
    """Setting ``name`` of a saved config read without its class (a fine-tuned checkpoint's, by the starting
    weights or the export): at its top (the flat layout, or a leaf outside the sections) or in one of its
    sections (leaf names are unique across a config, so the layout it was saved in does not matter); ``default``
    where neither holds it (a config saved before the setting existed)."""
    if name in saved:
        return saved[name]
    return next((part[name] for part in saved.values() if isinstance(part, dict) and name in part), default)


# Settings a saved configuration never sets: an action taken once, on the command line that asked for it (a run
# started with --overwrite, started again from its config.json, would clear its own folder).
NOT_FROM_CONFIG = frozenset({"overwrite"})


def default_map(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """click's ``default_map`` for a command made by :func:`click_options` from leaf values of ``cls`` (as
    :func:`saved_values` reads them): each flag's parameter name (``no_NAME`` of a negated flag) -> its value.
    Settings without a flag, and :data:`NOT_FROM_CONFIG`, are left out."""
    out: dict[str, Any] = {}
    for leaf in leaves(cls):
        if leaf.name not in values or not leaf.meta.get("cli", True) or leaf.name in NOT_FROM_CONFIG:
            continue
        value = values[leaf.name]
        if leaf.meta.get("negate"):
            out[f"no_{leaf.name}"] = not value
        else:
            out[leaf.name] = value
    return out


def config_option(cls: type, read: Callable[[str], dict[str, Any]], help: str) -> Callable[[Callable], Callable]:
    """``--config FILE``: every flag of ``cls`` takes its default from ``read(FILE)`` (leaf name -> value; a
    :class:`UsageError` is the flag's usage error); a flag given on the command line wins. Eager, so the
    defaults are in place before any other flag is read; they pass click's own checks (choices, paths) as a
    typed value would."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value is None or ctx.resilient_parsing:
            return
        try:
            values = read(value)
        except UsageError as e:
            raise click.BadParameter(e.message, ctx=ctx, param=param) from None
        ctx.default_map = {**(ctx.default_map or {}), **default_map(cls, values)}

    return click.option(
        "--config",
        type=click.Path(exists=True, dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=callback,
        help=help,
    )
