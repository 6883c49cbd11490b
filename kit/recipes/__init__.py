"""Paper recipes as data: one YAML file per paper, every value with its citation (issue "paper recipes").

Files (package data beside this module): ``weagent_mmsearch.yaml`` (WeAgent-MMSearch), ``points_seeker.yaml``
(POINTS-Seeker), ``long_mdr.yaml`` (the Long-MDR schedule and rescue), ``smoke.yaml`` (the CPU pipeline check:
WeAgent's recipe with small budgets) and ``preflight.yaml`` (an overlay that shrinks only sizes and the model,
so a paper recipe's objects can be built and stepped on 2 cores). A recipe file is::

    name: weagent_mmsearch
    title: WeAgent-MMSearch
    paper: ../shared/seeds/weagent_mmsearch.txt: ...
    extends: null            # or the name of the recipe this one overrides
    includes: [long_mdr]     # recipes whose sections are merged in (values of this file win)
    harness:                 # a section; its keys are the fields of the section's config class
      max_turns: {value: 20, source: "Table 5 (Episode: turn limit)"}
      ...
    rl:
      lr: {value: 5.0e-7, source: "App. A (a constant learning rate of 5.0e-7)"}

Each entry has ``value`` and ``source`` (the paper's section / table / equation), ``kit`` (the kit's own
choice, one line why) or both (the source cites the paper's part of a value, ``kit`` explains the rest);
``paper`` optionally quotes the paper where the kit's value is a reading of it (``"Kimi K2.x"`` →
``"kimi-k2.6"``). Sections with a config class (:data:`SECTION_MODELS`) are validated by building that
class from the section (an unknown key or a bad value fails at load).

A file is refused (:class:`RecipeError`) when it is over :data:`MAX_RECIPE_BYTES`, not UTF-8, repeats a key
or uses YAML aliases, gives a non-finite number, or has an ``rl_run.stages`` schedule that does not resolve.

Every key must be known (:mod:`kit.recipes.sections`: the config class's fields, ``rl_rollout``'s are
:class:`~kit.harness.config.HarnessConfig`'s, the other sections' are declared there with strict types: a bool
is not a number, a step count is >= 1); an unknown section or key, in a recipe or an overlay, is a
:class:`RecipeError` naming the file and the nearest known key. ``harness.tools_enabled`` / ``tool_set`` are
checked against the tool registry, and YAML nested thousands deep is a :class:`RecipeError`.

Sections without a config class: ``schedules`` (named RL stage schedules, :meth:`Recipe.schedule`, resolved by
:func:`kit.rl.staging.resolve_schedule`: WeAgent's ``weagent`` is one stage at Table 5's budgets), ``verl``
(the verl launch's constants, :mod:`kit.rl.verl.recipe_config`), ``tool_args`` / ``sft_data`` / ``advantage``
(values the code reads with :func:`paper_default`) and ``paper_only`` (values the paper states that the kit
records but does not run; each needs a ``source``). Under an overlay, :attr:`Recipe.replaced` keeps the
recipe's own entries the overlay replaced (``kit.cli recipe NAME --preflight`` shows both).

Raw values are read without validation by :func:`paper_default` (config classes take their defaults from
the recipe files, so the number lives in one place) and validated by :func:`load_recipe`.
"""

from __future__ import annotations

import importlib
import math
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

# sections validated by a config class, by its owner's "module:Class" (kit.recipes.sections: imported when a recipe
# is validated, never here, since the owners import this package for their defaults; they also register themselves)
from kit.recipes.sections import SECTION_MODELS

__all__ = ["RECIPE_DIR", "SECTION_MODELS", "Entry", "Recipe", "RecipeError", "load_recipe", "paper_default",
           "recipe_names", "recipes_markdown", "register_recipe"]

RECIPE_DIR = Path(__file__).resolve().parent
META_KEYS = ("name", "title", "paper", "extends", "includes", "description")
MAX_RECIPE_BYTES = 256 * 1024  # ~30x the largest recipe; PyYAML parses ~100 KB/s, so a huge file would stall a run
class RecipeError(ValueError):
    """A recipe file that is missing, malformed, uncited or fails its section's validation."""


class Entry(BaseModel):
    """One recipe value. ``origin``: the recipe file it came from (an inherited or included value keeps it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: Any
    source: str | None = None
    kit: str | None = None
    paper: str | None = None
    origin: str = ""

    @model_validator(mode="after")
    def _one_reason(self) -> Entry:
        if not _finite(self.value):  # NaN / inf: not JSON (`kit.cli recipe --json`), never a paper value
            raise ValueError(f"value must be finite (no NaN or infinity), got {self.value!r}")
        if self.source is None and self.kit is None:
            raise ValueError("give 'source' (the paper's section/table/equation) or 'kit' (the kit's reason), or both")
        for k in ("source", "kit"):
            v = getattr(self, k)
            if v is not None and not str(v).strip():
                raise ValueError(f"'{k}' must not be empty")
        return self

    @property
    def cited(self) -> bool:
        """True when the value is the paper's (``source`` set and no ``kit`` part), False for a kit choice."""
        return self.source is not None and self.kit is None


def _finite(v: Any) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, dict):
        return all(_finite(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return all(_finite(x) for x in v)
    return True


def _loader():
    """A safe YAML loader that refuses duplicate keys (the later one would silently drop a cited value) and
    aliases (``*name``: a few lines can expand to gigabytes in the JSON view; a recipe writes each value once).

    libyaml's ``CSafeLoader`` when PyYAML was built with it (about 10x faster than the pure-Python parser), else
    ``SafeLoader``. The C composer cannot be hooked, and resolves an alias to the node its anchor named (shared,
    never copied): an alias is found in the composed tree, before any value is constructed."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[valid-type,misc]
        def get_single_data(self):
            node = self.get_single_node()
            if node is None:
                return None
            _refuse_aliases(node, yaml)
            return self.construct_document(node)

        def construct_mapping(self, node, deep=False):
            seen: set = set()
            for k, _ in node.value:
                key = self.construct_object(k, deep=deep)
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: SafeConstructor reports it
                    continue
                if dup:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", k.start_mark)
            return super().construct_mapping(node, deep)

    return Loader


def _refuse_aliases(root, yaml) -> None:
    """Raise ``yaml.composer.ComposerError`` when a node of the composed tree is reached twice: an alias (the
    composer shares the anchored node). Iterative, so a deeply nested file reaches the constructor's
    RecursionError (a :class:`RecipeError` naming the depth) instead of failing here."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a recipe", node.start_mark)
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            todo.extend(x for kv in node.value for x in kv)
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)


#: recipes registered from outside the kit (:func:`register_recipe`): name -> file
_USER_RECIPES: dict[str, Path] = {}


def _path(name: str) -> Path:
    if not isinstance(name, str) or not name.replace("_", "").isalnum():
        raise RecipeError(f"bad recipe name {name!r}; choose one of {recipe_names()}")
    if name in _USER_RECIPES:
        return _USER_RECIPES[name]
    p = RECIPE_DIR / f"{name}.yaml"
    if not p.is_file():
        known = recipe_names() + sorted(_USER_RECIPES)
        raise RecipeError(f"unknown recipe {name!r}; choose one of {known}")
    return p


def register_recipe(path: str | Path, *, replace: bool = False) -> Recipe:
    """Make the recipe file ``path`` (anywhere on disk) loadable by its ``name``; returns it validated.

    A recipe of your own is usually a few lines: ``extends: weagent_mmsearch`` and the entries you change, each
    with ``value`` and a ``source`` or ``kit`` reason, like the shipped files (module docstring). It then works
    wherever a recipe name does: :func:`load_recipe`, :func:`paper_default`, ``Profile(recipe=name)``.

    Raises:
        RecipeError: the file is missing or malformed (the same checks as a shipped recipe, which it may not
            shadow), its name is registered from another file and ``replace`` is False, or it fails validation
            (the registration is then undone).
    """
    import yaml

    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise RecipeError(f"recipe file {path!s} does not exist")
    try:
        name = yaml.safe_load(p.read_text(encoding="utf-8")[:MAX_RECIPE_BYTES]).get("name")
    except (yaml.YAMLError, UnicodeDecodeError, AttributeError) as e:
        raise RecipeError(f"{p.name}: not a recipe mapping with a 'name': {str(e).splitlines()[0][:200]}") from None
    if not isinstance(name, str) or not name.replace("_", "").isalnum():
        raise RecipeError(f"{p.name}: 'name' must be letters, digits and '_', got {name!r}")
    if name in recipe_names():
        raise RecipeError(f"{p.name}: {name!r} is a shipped recipe; give yours another name (extends: {name})")
    if name in _USER_RECIPES and _USER_RECIPES[name] != p and not replace:
        raise RecipeError(f"recipe {name!r} is registered from {_USER_RECIPES[name]} (pass replace=True)")
    before = _USER_RECIPES.get(name)
    _USER_RECIPES[name] = p
    _clear_caches()
    try:
        return load_recipe(name)
    except RecipeError:
        _USER_RECIPES.pop(name) if before is None else _USER_RECIPES.__setitem__(name, before)
        _clear_caches()
        raise


def _clear_caches() -> None:
    # a re-registered file may change entries that the caches hold (and recipes extending it)
    _raw.cache_clear(), _entries.cache_clear(), _load.cache_clear()


def recipe_names() -> list[str]:
    """Names of the recipe files shipped with the kit (sorted)."""
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


@cache
def _raw(name: str) -> dict[str, Any]:
    import yaml

    path = _path(name)
    raw = path.read_bytes()
    if len(raw) > MAX_RECIPE_BYTES:
        raise RecipeError(f"{path.name}: too large ({len(raw):,} bytes > {MAX_RECIPE_BYTES:,}); a recipe is a few KB")
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=_loader())  # a (C)SafeLoader subclass
    except UnicodeDecodeError as e:
        raise RecipeError(f"{path.name}: not UTF-8 text: {e}") from None
    except yaml.YAMLError as e:
        if "maximum nesting depth" in str(e):  # libyaml's own depth limit (1,000 levels)
            raise RecipeError(f"{path.name}: nested too deeply (a recipe value is a few levels deep)") from None
        raise RecipeError(f"{path.name}: not valid YAML: {e}") from None
    except RecursionError:  # thousands of nested [ or {: no recipe value is that deep
        raise RecipeError(f"{path.name}: nested too deeply (a recipe value is a few levels deep)") from None
    if not isinstance(data, dict) or data.get("name") != name:
        raise RecipeError(f"{path.name}: a mapping whose 'name' is {name!r} expected")
    for k in ("title", "paper", "description", "extends"):
        if data.get(k) is not None and not isinstance(data[k], str):
            raise RecipeError(f"{path.name}: {k!r} must be text (extends: one recipe name), got {data[k]!r}")
    inc = data.get("includes")
    if inc is not None and not (isinstance(inc, list) and all(isinstance(x, str) for x in inc)):
        raise RecipeError(f"{path.name}: 'includes' must be a list of recipe names, got {inc!r}")
    bad = [k for k, v in data.items() if not isinstance(k, str)
           or (isinstance(v, dict) and k != "stages" and any(not isinstance(x, str) for x in v))]
    if bad:
        raise RecipeError(f"{path.name}: section and key names must be text; section(s) {bad!r} are not")
    return data


@cache
def _entries(name: str, _seen: tuple[str, ...] = ()) -> dict[str, Entry]:
    """``{"section.key": Entry}`` of ``name`` with its ``extends`` base and ``includes`` merged in."""
    if name in _seen:
        raise RecipeError(f"recipe cycle: {' -> '.join((*_seen, name))}")
    data = _raw(name)
    out: dict[str, Entry] = {}
    base = data.get("extends")
    if base:
        out.update(_entries(base, (*_seen, name)))
    for inc in data.get("includes") or []:
        out.update(_entries(inc, (*_seen, name)))
    for section, body in data.items():
        if section in META_KEYS:
            continue
        if section == "stages":
            out["stages"] = _entry(name, "stages", body)
            continue
        if not isinstance(body, dict):
            raise RecipeError(f"{name}.yaml: section {section!r} must be a mapping of key: {{value, source|kit}}")
        for key, e in body.items():
            out[f"{section}.{key}"] = _entry(name, f"{section}.{key}", e)
    return out


def _entry(recipe: str, key: str, e: Any) -> Entry:
    if not isinstance(e, dict) or "value" not in e:
        raise RecipeError(f"{recipe}.yaml: {key}: an entry {{value: ..., source: ... | kit: ...}} expected, got {e!r}")
    if "origin" in e:  # the loader records the file a value came from; a file cannot claim another's
        raise RecipeError(f"{recipe}.yaml: {key}: 'origin' is set by the loader, not written in a recipe")
    try:
        return Entry(**e, origin=recipe)
    except ValueError as err:
        raise RecipeError(f"{recipe}.yaml: {key}: {err}") from None
    except RecursionError:  # _finite walks the value
        raise RecipeError(f"{recipe}.yaml: {key}: value nested too deeply") from None


def paper_default(key: str, recipe: str = "weagent_mmsearch") -> Any:
    """The raw value of ``key`` (``"section.name"``) in ``recipe``, unvalidated: config classes use it for
    their field defaults, so a paper value is written once, in the recipe file, with its citation.

    Raises:
        RecipeError: an unknown recipe or key.
    """
    try:
        return _entries(recipe)[key].value
    except KeyError:
        raise RecipeError(f"recipe {recipe!r} has no value {key!r}") from None


class Recipe:
    """A resolved recipe: ``entries`` maps ``"section.key"`` to an :class:`Entry`; ``overlays`` are the
    recipes applied on top (e.g. ``("preflight",)``), whose entries win.

    Use :meth:`get` for one value, :meth:`section` for a config section (``recipe.harness()`` builds the
    :class:`~kit.harness.config.HarnessConfig`), :meth:`rows` for the documentation table.
    """

    def __init__(self, name: str, overlays: tuple[str, ...] = ()):
        self.name = name
        self.overlays = tuple(overlays)
        meta = _raw(name)
        self.title: str = meta.get("title", name)
        self.paper: str = meta.get("paper", "")
        self.description: str = meta.get("description", "")
        entries = dict(_entries(name))
        #: ``{"section.key": Entry}`` of the recipe's own values an overlay replaced (``kit.cli recipe --preflight``)
        self.replaced: dict[str, Entry] = {}
        for o in self.overlays:
            for k, e in _entries(o).items():
                if k in entries and k not in self.replaced:
                    self.replaced[k] = entries[k]
                entries[k] = e
        self.entries: dict[str, Entry] = entries

    def __repr__(self) -> str:
        return f"Recipe({self.name!r}{', overlays=' + repr(self.overlays) if self.overlays else ''})"

    def get(self, key: str, default: Any = ...) -> Any:
        """The value of ``key`` (``"section.name"``). Raises :class:`RecipeError` when absent and no default."""
        if key in self.entries:
            return self.entries[key].value
        if default is not ...:
            return default
        raise RecipeError(f"recipe {self.label} has no value {key!r}")

    def has(self, key: str) -> bool:
        return key in self.entries

    @property
    def label(self) -> str:
        return "+".join((self.name, *self.overlays))

    def section(self, section: str) -> dict[str, Any]:
        """``{key: value}`` of one section (empty when the recipe has none)."""
        p = section + "."
        return {k[len(p):]: e.value for k, e in self.entries.items() if k.startswith(p)}

    def build(self, section: str, **overrides: Any) -> Any:
        """The config object of ``section`` (:data:`SECTION_MODELS`) from the recipe with ``overrides``."""
        return _model(section)(**{**self.section(section), **overrides})

    def harness(self, **overrides: Any):
        """The recipe's :class:`~kit.harness.config.HarnessConfig` with ``overrides`` (validated: pydantic's
        ``ValidationError``, a ``ValueError``, on a bad value). Only ``overrides`` count as set
        (``model_fields_set``), as in :meth:`kit.profiles.Profile.harness`: a recipe value is not the caller's
        choice, so a later rule may still change it (vanilla GSPO turns the recipe's ``self_recovery`` off,
        :func:`kit.rl.eligibility.explicit_self_recovery`)."""
        cfg = self.build("harness", **overrides)  # validated here
        return type(cfg).model_construct(_fields_set=set(overrides), **{k: getattr(cfg, k) for k in type(cfg).model_fields})

    def stages(self) -> list:
        """The recipe's stage schedule as :class:`~kit.rl.staging.Stage` objects (``[]`` when it has none)."""
        from kit.recipes.sections import recipe_part

        stage = recipe_part("stage")  # kit.rl.staging.Stage, imported now: kit.rl imports kit.recipes
        return [stage(**s) for s in self.get("stages", [])]

    def schedule(self, name: str) -> list:
        """The named stage schedule ``schedules.<name>`` as :class:`~kit.rl.staging.Stage` objects (e.g.
        WeAgent's one Table 5 stage, ``schedules.weagent``).

        Raises:
            RecipeError: no such schedule, or one that is not a non-empty list of stages.
        """
        from kit.recipes.sections import recipe_part

        key = f"schedules.{name}"
        if key not in self.entries:
            raise RecipeError(f"recipe {self.label} has no schedule {name!r}; named ones: {sorted(self.section('schedules'))}")
        spec = self.entries[key].value
        if not isinstance(spec, list) or not spec or not all(isinstance(s, dict) for s in spec):
            raise RecipeError(f"recipe {self.label}: {key} must be a non-empty list of stages, got {spec!r}")
        return [recipe_part("stage")(**s) for s in spec]

    def validate(self) -> Recipe:
        """Check every key is known (:mod:`kit.recipes.sections`: a config class's fields or a declared key
        list; an overlay's too), bools are not numbers, then build every section's config class, its tools
        (against the tool registry) and the stage lists; raises :class:`RecipeError` on the first failure
        (naming the recipe, the file and the key). Returns ``self``."""
        from kit.recipes.sections import SECTION_KEYS, bool_problem, check_keys, recipe_part, section_problem

        problem = check_keys(self.entries, SECTION_MODELS, {k: e.origin for k, e in self.entries.items()})
        if problem:
            raise RecipeError(f"recipe {self.label}: {problem}")
        present = {k.split(".", 1)[0] for k in self.entries}
        for section in sorted(present & set(SECTION_KEYS)):
            bad = section_problem(section, self.section(section))
            if bad:
                raise RecipeError(f"recipe {self.label}: {self.entries[bad[0]].origin if bad[0] in self.entries else '?'}"
                                  f".yaml: {bad[1]}")
        for section in sorted(present & {*SECTION_MODELS, "rl_rollout"}):
            model = _model("harness" if section == "rl_rollout" else section)
            problem = bool_problem(model, self.section(section), section)
            if problem:
                raise RecipeError(f"recipe {self.label}: {problem}")
        for section in sorted(present & set(SECTION_MODELS)):
            try:
                self.build(section)
            except Exception as e:  # pydantic ValidationError and config checks: report as a recipe error
                raise RecipeError(f"recipe {self.label}: section {section!r}: {e}") from None
        if present & {"harness", "rl_rollout"}:  # a tool name the registry lacks fails here, not at harness build
            config_tool_specs = recipe_part("config_tool_specs")
            for where, over in (("harness", {}), ("rl_rollout", self.section("rl_rollout"))):
                try:
                    config_tool_specs(self.harness(**over))
                except Exception as e:
                    raise RecipeError(f"recipe {self.label}: {where}: tools: {e}") from None
        stage = recipe_part("stage")
        lists = [("stages", self.get("stages", []))] + [(f"schedules.{n}", v) for n, v in self.section("schedules").items()]
        for where, spec in lists:
            for i, st in enumerate(spec if isinstance(spec, list) else []):
                problem = bool_problem(stage, st, f"{where}[{i}]") if isinstance(st, dict) else None
                if problem:
                    raise RecipeError(f"recipe {self.label}: {problem}")
        try:
            self.stages()
        except Exception as e:
            raise RecipeError(f"recipe {self.label}: stages: {e}") from None
        for name in self.section("schedules"):
            try:
                self.schedule(name)
            except Exception as e:
                raise RecipeError(f"recipe {self.label}: schedules.{name}: {e}") from None
        uncited = [k for k, e in self.entries.items() if k.startswith("paper_only.") and not e.source]
        if uncited:  # a value the kit does not run is there only because the paper states it
            raise RecipeError(f"recipe {self.label}: {uncited}: a paper_only value needs its 'source'")
        if self.has("rl_run.stages"):  # the RL schedule notebook 05 and verl resolve: a bad spec fails here
            try:
                recipe_part("resolve_schedule")(self, self.harness(**self.section("rl_rollout")))
            except Exception as e:
                raise RecipeError(f"recipe {self.label}: rl_run.stages: {e}") from None
        return self

    def rows(self) -> list[dict[str, Any]]:
        """One row per value: key, value, paper value (the value when cited, the paper's wording when
        given, else ``None``), source or kit reason, origin file, and ``replaced``: the recipe's own value an
        overlay replaced (``{"value", "paper", "source", "kit", "origin"}``, else ``None``)."""
        out = []
        for k in sorted(self.entries, key=_order):
            out.append({"key": k, **_row(self.entries[k]),
                        "replaced": _row(self.replaced[k]) if k in self.replaced else None})
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready resolved view (``kit.cli recipe NAME --json``)."""
        return {"name": self.name, "overlays": list(self.overlays), "title": self.title, "paper": self.paper,
                "values": self.rows()}


def _model(section: str) -> Any:
    """The config class of ``section`` (:data:`SECTION_MODELS`). Raises :class:`RecipeError`."""
    if section not in SECTION_MODELS:
        raise RecipeError(f"section {section!r} has no config class; known: {sorted(SECTION_MODELS)}")
    from kit.recipes.sections import section_model

    return section_model(section)


def _row(e: Entry) -> dict[str, Any]:
    return {"value": e.value, "paper": e.paper if e.paper is not None else (e.value if e.cited else None),
            "source": e.source, "kit": e.kit, "origin": e.origin}


def _order(key: str) -> tuple[int, str]:
    first = key.split(".", 1)[0]
    rank = {"harness": 0, "tools": 1, "vfold": 2, "eval": 3, "data": 4, "sft": 5, "rl": 6, "rescue": 7, "stages": 8,
            "paper_only": 11}
    return rank.get(first, 10 if first == "verl" else 9), key


@cache
def _load(name: str, overlays: tuple[str, ...]) -> Recipe:
    return Recipe(name, overlays).validate()


def load_recipe(name: str, overlays: tuple[str, ...] | list[str] | str = ()) -> Recipe:
    """The validated recipe ``name`` with ``overlays`` applied in order (cached; treat it as read-only).

    Raises:
        RecipeError: an unknown name, a malformed or uncited entry, a section its config class refuses.
    """
    return _load(name, (overlays,) if isinstance(overlays, str) else tuple(overlays))


def __getattr__(name: str) -> Any:
    """``recipes_markdown`` (the docs page generator, :mod:`kit.recipes.markdown`), imported on first use: it reads
    :mod:`kit.recipes.mechanisms`, which loads recipes from this package, so this package does not import it."""
    if name == "recipes_markdown":
        return importlib.import_module("kit.recipes.markdown").recipes_markdown
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
