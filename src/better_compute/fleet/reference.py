"""docs/fleet-reference.md, generated from the FleetConfig JSON Schema (`better-compute docs fleet`).

One table per object of the document, every key with its type, whether it is required,
its default and its constraints, exactly as the schema says them; a test regenerates the
file and compares, so the reference cannot drift from the code.
"""

from __future__ import annotations

import json
from typing import Any

from better_compute.fleet.schema import json_schema

__all__ = ["reference_markdown"]

SECTIONS = (
    ("FleetConfig", "The document"),
    ("SiteSpec", "`sites[]`"),
    ("ProviderAccountSpec", "`providerAccounts[]`"),
    ("PoolSpec", "`pools[]`"),
    ("Policy", "`pools[].policy`"),
    ("KubernetesPolicy", "`pools[].policy.kubernetes`"),
    ("HealthPolicy", "`pools[].policy.health`"),
    ("Substrate", "`pools[].policy.substrate`"),
    ("Cluster", "`pools[].policy.substrate.cluster`"),
    ("ClusterCreate", "`pools[].policy.substrate.cluster.create`"),
    ("Disruption", "`pools[].policy.substrate.disruption`"),
    ("Flavor", "`pools[].policy.substrate.flavors[]`"),
    ("Gpus", "`pools[].policy.substrate.flavors[].gpus`"),
    ("Autoscaling", "`pools[].policy.substrate.flavors[].autoscaling`"),
)
"""Each object of the schema, in reading order, with where it sits in the document."""

_CONSTRAINTS = (
    ("minimum", "≥ {}"),
    ("maximum", "≤ {}"),
    ("minLength", "length ≥ {}"),
    ("maxLength", "length ≤ {}"),
    ("minItems", "≥ {} items"),
    ("maxItems", "≤ {} items"),
    ("maxProperties", "≤ {} entries"),
    ("pattern", "matches `{}`"),
)


def _anchor(name: str) -> str:
    title = dict(SECTIONS)[name]
    return "#" + "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}]({_anchor(name)})"
    if "anyOf" in schema:
        return " or ".join(_type(option) for option in schema["anyOf"] if option.get("type") != "null")
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and "patternProperties" in schema:
        return "map of string to string"
    return str(kind)


def _constraints(schema: dict[str, Any]) -> str:
    found: list[str] = []
    for option in [schema, *schema.get("anyOf", [])]:
        found.extend(template.format(option[key]) for key, template in _CONSTRAINTS if key in option)
        items = option.get("items")
        if isinstance(items, dict):
            found.extend(f"each {template.format(items[key])}" for key, template in _CONSTRAINTS if key in items)
    return "; ".join(found).replace("|", "\\|")


def _table(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    lines = ["| key | type | required | default | constraints |", "|---|---|---|---|---|"]
    for key, field in sorted(schema.get("properties", {}).items()):
        default = f"`{json.dumps(field['default'])}`" if "default" in field else ""
        lines.append(
            f"| `{key}` | {_type(field)} | {'yes' if key in required else ''} | {default} | {_constraints(field)} |"
        )
    return lines


def reference_markdown() -> str:
    """The whole reference page."""
    schema = json.loads(json_schema())
    objects = {"FleetConfig": schema, **schema["$defs"]}
    lines = [
        "# FleetConfig reference",
        "",
        "Generated from the JSON Schema by `better-compute docs fleet > docs/fleet-reference.md`; a test checks it",
        "is current. `better-compute fleet schema` prints the schema itself; [fleet-config.md](fleet-config.md) is",
        "the guide. Unknown keys are refused everywhere, and nothing is coerced. A provider account's `config` is",
        "checked by its provider's driver ([providers.md](providers.md)).",
    ]
    for name, title in SECTIONS:
        described = objects[name]
        lines += ["", f"## {title}", ""]
        if described.get("description"):
            lines += [described["description"], ""]
        lines += _table(described)
    missing = sorted(set(objects) - {name for name, _ in SECTIONS})
    if missing:
        raise ValueError(f"the reference has no section for {', '.join(missing)}: add them to SECTIONS")
    return "\n".join(lines) + "\n"
