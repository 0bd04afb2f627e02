"""docs/fleet-reference.md is what the FleetConfig schema generates, and covers every key of it."""

from __future__ import annotations

import json

from doc_files import ROOT

from better_compute.fleet import json_schema
from better_compute.fleet.reference import reference_markdown


def test_the_fleet_reference_is_current() -> None:
    assert (ROOT / "docs" / "fleet-reference.md").read_text() == reference_markdown(), (
        "regenerate: better-compute docs fleet > docs/fleet-reference.md"
    )


def test_the_reference_names_every_key_of_the_schema() -> None:
    schema = json.loads(json_schema())
    text = reference_markdown()
    for model in [schema, *schema["$defs"].values()]:
        for key in model["properties"]:
            assert f"| `{key}` |" in text, key
