"""Which product modules name each ``berttrain`` option: how far the knowledge of one setting reaches.

    python scripts/tools/option_reach.py            # the options named in more than 2 modules, and the figures
    python scripts/tools/option_reach.py --all      # every option and its modules
    python scripts/tools/option_reach.py --json     # {option: [modules]} and the figures

The options are read from the command line itself: every ``click.Option`` of every ``berttrain`` command (its
dest name and flags; ``--help`` aside), and for those built from a config dataclass (``cli.options.leaves``) the
config section that holds it. An option is one dest name: ``--lr`` of ``pretrain`` and of ``finetune`` is one
option (one field of ``OptimConfig``).

A product module is a ``.py`` file under ``cli/``, ``trainer/`` or ``schemas/``. A module NAMES an option when
its syntax tree holds one of these (the rule; ``option_reach.names_in`` applies it):

1. its declaration: ``NAME: type = opt(...)`` (or ``section``/``with_tags``/``given_field``), a field of a class;
2. a read of that config field: ``RECEIVER.NAME`` not called (a config field is a value; ``"...".format(...)``,
   ``optimizer.step()`` are methods of other things), whose receiver is a config: ``cfg``, ``config``,
   ``self`` inside a config class, a name whose annotation in that module is a config class (``optim:
   OptimConfig``), or an attribute named as the option's section (``cfg.optim.lr``, ``x.run.output``);
3. its flag as a word of a string (``"--lr"``, a help text or message that names ``--lr``), docstrings aside
   (they document; comments are not in the tree either);
4. its dest name as a string used as the option: the name argument of ``getattr``/``hasattr``/``setattr``, of
   ``check``/``UsageError``/``UserError``/``flag_for``/``with_tags`` and the like (the machinery's ``param``); a
   key of a subscript of a settings mapping (``values["lr"]``, ``saved[...]``, ``given``); a member test against
   the given names (``"lr" in given``); an element of a literal tuple/list/set of which at least one other
   element is another option's name (a table of options, e.g. a resume list); a keyword ``NAME=`` of a call to
   ``replace`` or to a config class.

Not counted (the same word meaning something else): a torch param group's ``group["lr"]``, ``"...".format``, an
``output`` of some other object, a local variable of the same name, a keyword of an unrelated call. Both figures
are printed: the STRICT WORD count (modules whose tree holds the dest name as any identifier, attribute or string
at all) and the OPTION count (the rule above); ``tests/scripts/test_option_reach.py`` holds the latter.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import re
import sys
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("cli", "trainer", "schemas")
LIMIT = 2  # issue 55: an option is named in at most 2 product modules
DECLARERS = {"opt", "section", "with_tags", "given_field"}
# Calls whose string argument names an option as such (a parameter of the usage-error machinery, getattr, ...).
NAMING_CALLS = {
    "getattr",
    "hasattr",
    "setattr",
    "check",
    "UsageError",
    "UserError",
    "flag_for",
    "with_tags",
    "only_with",
    "bad_parameter",
}
SETTINGS = re.compile(r"(values|saved|settings|flags|given|kwargs|defaults|overrides|fixed|cfg|config)s?$", re.I)


@dataclass
class Option:
    name: str  # the dest name
    flags: set[str] = field(default_factory=set)
    sections: set[str] = field(default_factory=set)  # the config sections holding it ("optim", "run", ...)
    commands: set[str] = field(default_factory=set)


def _config_classes(cls: type) -> Iterator[type]:
    yield cls
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("section") is not None:
            yield from _config_classes(f.metadata["section"])
        elif dataclasses.is_dataclass(hints.get(f.name)):
            yield from _config_classes(hints[f.name])


def berttrain_options() -> tuple[dict[str, Option], set[str]]:
    """Every option of every ``berttrain`` command, and the names of the config classes behind them."""
    import click

    from bertstream.cli import options
    from bertstream.trainer.cli import main

    found: dict[str, Option] = {}
    classes: set[str] = set()
    for command_name, command in main.commands.items():
        leaves = {}
        cls = getattr(command.callback, "__config__", None) or _command_config(command_name)
        if cls is not None:
            classes |= {c.__name__ for c in _config_classes(cls)}
            leaves = {leaf.name: leaf for leaf in options.leaves(cls)}
        for p in command.params:
            if not isinstance(p, click.Option) or p.name in (None, "help"):
                continue
            o = found.setdefault(p.name, Option(p.name))
            o.flags |= {f for f in (*p.opts, *p.secondary_opts) if f.startswith("--")}
            o.commands.add(command_name)
            leaf = leaves.get(p.name)
            if leaf is not None and leaf.section:
                o.sections.add(leaf.section)
    return found, classes


def _command_config(name: str) -> type | None:
    """The config dataclass a command's options are built from (``click_options(CLS)``)."""
    from bertstream.trainer.config import TrainConfig
    from bertstream.trainer.embed import EmbedConfig
    from bertstream.trainer.finetune.config import FinetuneConfig

    return {"pretrain": TrainConfig, "finetune": FinetuneConfig, "embed": EmbedConfig}.get(name)


def product_modules() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (REPO / top).rglob("*.py"))


def _rightmost(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _rightmost(node.value)
    if isinstance(node, ast.Call):
        return _rightmost(node.func)
    return None


def _func_name(call: ast.Call) -> str | None:
    return _rightmost(call.func)


def _annotation_names(node: ast.AST | None) -> set[str]:
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return set(re.findall(r"\w+", node.value))
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def names_in(tree: ast.Module, opts: dict[str, Option], classes: set[str]) -> set[str]:
    """The options ``tree`` names, by the rule of the module docstring."""
    named: set[str] = set()
    sections = {s for o in opts.values() for s in o.sections}
    receivers = {"cfg", "config"}
    for node in ast.walk(tree):  # names annotated with a config class
        if isinstance(node, ast.arg) and _annotation_names(node.annotation) & classes:
            receivers.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if _annotation_names(node.annotation) & classes:
                receivers.add(node.target.id)
    config_bodies = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name in classes]
    self_reads = {id(a) for c in config_bodies for a in ast.walk(c) if isinstance(a, ast.Attribute)}
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    flag_words = {f: re.compile(r"(?<![\w-])" + re.escape(f) + r"(?![\w-])") for o in opts.values() for f in o.flags}
    flag_owner = {f: o.name for o in opts.values() for f in o.flags}

    for node in ast.walk(tree):
        # 1. declarations
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in opts:
            if isinstance(node.value, ast.Call) and _func_name(node.value) in DECLARERS:
                named.add(node.target.id)
        # 2. reads of a config field
        elif isinstance(node, ast.Attribute) and node.attr in opts and id(node) not in called:
            recv = _rightmost(node.value)
            if recv in receivers or recv in sections or (recv == "self" and id(node) in self_reads):
                named.add(node.attr)
        # 3. the flag as a word of a string
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "--" in node.value:
            if id(node) in docstrings:
                continue
            named |= {flag_owner[f] for f, rx in flag_words.items() if rx.search(node.value)}
        # 4. the dest name as a string used as the option
        elif isinstance(node, ast.Call):
            fname = _func_name(node)
            if fname in NAMING_CALLS:
                named |= {a.value for a in node.args if isinstance(a, ast.Constant) and a.value in opts}
            if fname == "replace" or fname in classes:
                named |= {k.arg for k in node.keywords if k.arg in opts}
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in opts:
            if SETTINGS.search(_rightmost(node.value) or ""):
                named.add(node.slice.value)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and node.left.value in opts:
            if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                if any("given" in (_rightmost(c) or "") for c in node.comparators):
                    named.add(node.left.value)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            strings = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            hits = [s for s in strings if s in opts]
            if len(hits) >= 2:
                named |= set(hits)
    return named


def words_in(tree: ast.Module, opts: dict[str, Option]) -> set[str]:
    """The strict word count: the options whose dest name is any identifier, attribute or string of ``tree``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        for word in (
            getattr(node, "id", None),
            getattr(node, "attr", None),
            getattr(node, "arg", None),
            node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None,
        ):
            if isinstance(word, str) and word in opts:
                found.add(word)
    return found


def reach() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(option -> product modules naming it by the rule, option -> modules holding the word at all)."""
    opts, classes = berttrain_options()
    by_rule: dict[str, list[str]] = {name: [] for name in opts}
    by_word: dict[str, list[str]] = {name: [] for name in opts}
    for path in product_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = str(path.relative_to(REPO))
        for name in names_in(tree, opts, classes):
            by_rule[name].append(rel)
        for name in words_in(tree, opts):
            by_word[name].append(rel)
    return by_rule, by_word


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--all", action="store_true", help="list every option, not only those past the limit")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    by_rule, by_word = reach()
    over = {k: v for k, v in by_rule.items() if len(v) > LIMIT}
    words_over = sum(len(v) > LIMIT for v in by_word.values())
    if args.json:
        print(json.dumps({"options": by_rule, "over": len(over), "words_over": words_over}, indent=1))
        return 0
    for name, mods in sorted(by_rule.items() if args.all else over.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"{name:28} {len(mods)}  {', '.join(mods)}")
    print(
        f"{len(by_rule)} options; named in more than {LIMIT} product modules: {len(over)} by the rule "
        f"(declaration, config reads, flag, dest as the option), {words_over} by the strict word count"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
