"""The operator's price table: what a machine costs per hour, per provider, in their own file.

None is shipped and none is fetched: prices differ by contract, commitment and region, so only
the operator knows theirs. `fleet plan --prices FILE` (YAML or JSON) and the `prices` member of
`POST /v1/fleet/plan` take the same table:

    version: 1
    currency: USD                 # a label shown beside every figure (default USD)
    onDemand:                     # per machine per hour, by the account's `provider`
      gcp: {a3-highgpu-8g: 88.49}
      aws: {p5.48xlarge: 98.32}
    spot:                         # Spot / preemptible prices; a spot flavor finds its price here only
      gcp: {a3-highgpu-8g: 26.55}

A machine type the table does not name is unpriced, never guessed. Problems are reported at
JSON pointers into the table (`/onDemand/gcp/a3-highgpu-8g`), and YAML aliases are refused, so a
small file cannot expand into a large value.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from better_compute.core.errors import ComputeError, Problem
from better_compute.core.input import InputLimits, check_value
from better_compute.fleet.validate import problems_of

__all__ = ["PRICES", "PriceTable", "load_prices", "parse_prices"]

PRICES = InputLimits(max_bytes=1024 * 1024, max_depth=4, max_string=256)
"""A price table: a megabyte of machine types is far more than any provider offers."""

Name = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^\S+$")]
Price = Annotated[float, Field(ge=0, le=1_000_000, strict=True)]
Prices = dict[Name, dict[Name, Price]]


class PriceTable(BaseModel):
    """Machine-type prices per hour by provider; `price` answers None for what it does not name."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    version: Literal[1]
    currency: str = "USD"
    on_demand: Prices = Field(default_factory=dict, alias="onDemand")
    spot: Prices = Field(default_factory=dict)

    @field_validator("currency")
    @classmethod
    def _code(cls, value: str) -> str:
        if len(value) != 3 or not (value.isascii() and value.isalpha() and value.isupper()):
            raise ValueError("is a currency's three capital letters, such as USD or EUR")
        return value

    def price(self, provider: str, machine_type: str, *, spot: bool) -> float | None:
        table = self.spot if spot else self.on_demand
        return table.get(provider, {}).get(machine_type)


class _NoAliases(yaml.SafeLoader):
    """SafeLoader that refuses aliases: `*a` repeated would expand a few bytes into gigabytes."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.MarkedYAMLError(None, None, "aliases are not allowed in a price table", event.start_mark)
        return super().compose_node(parent, index)


def load_prices(raw: bytes, *, what: str) -> Any:
    """A price file's bytes (YAML, of which JSON is a part) as a plain value; INVALID_INPUT when they
    are too large or not YAML."""
    if len(raw) > PRICES.max_bytes:
        raise ComputeError.invalid([Problem("", f"{what} is at most {PRICES.max_bytes} bytes, not {len(raw)}")])
    try:
        return yaml.load(raw, Loader=_NoAliases)  # noqa: S506 - a SafeLoader that also refuses aliases
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not YAML"
        raise ComputeError.invalid([Problem("", f"{what} is not YAML or JSON: {problem}{where}")]) from None


def parse_prices(value: Any) -> PriceTable:
    """A price table, or INVALID_INPUT with every problem at its pointer into the table."""
    check_value(value, limits=PRICES)
    if not isinstance(value, dict):
        raise ComputeError.invalid([Problem("", "a price table is an object (version, currency, onDemand, spot)")])
    try:
        return PriceTable.model_validate(value)
    except ValidationError as exc:
        raise ComputeError.invalid(problems_of(exc, ())) from None
