"""Validation of a FleetConfig document: every problem at once, each at a JSON pointer.

Three passes, so that one mistake does not hide the next: each entry of each
section is parsed on its own (schema.py), then the cross-references are checked
on what parsed (a site and an account exist, names are unique, one cluster is
adopted by one pool, secrets are references), then each substrate is handed to
its provider's `validate_substrate` hook for the provider's own vocabulary. Any
problem raises one ComputeError INVALID_INPUT listing them all.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from pydantic import BaseModel, ValidationError

from better_compute.core.errors import ComputeError, ErrorCode, Problem
from better_compute.core.input import quote
from better_compute.fleet.schema import FleetDocument, PoolSpec, ProviderAccountSpec, SiteSpec
from better_compute.secrets import is_reference, parse_reference
from better_compute.vps.accounts import MAX_CONFIG_BYTES
from better_compute.vps.provider import (
    AccountConfig,
    ProviderAccount,
    ProviderImpl,
    SecretResolver,
    secret_fields,
)

__all__ = ["SECRET_KEY", "pointer", "problems_of", "validate_document"]

SECTIONS: dict[str, type[BaseModel]] = {"sites": SiteSpec, "providerAccounts": ProviderAccountSpec, "pools": PoolSpec}

SECRET_KEY = re.compile(r"(?i)(token|passw|secret|private_?key|api_?key|credential|^pat$|^auth)")
"""Config keys, at any depth, whose values are secrets when the provider declares no model:
each must be a `secret://` reference (`token`, `doTokenValue`, `tokens: [...]`, `pat`, `auth: {...}`)."""

_PATTERN_MESSAGES = {
    "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$": "must be lower-case letters, digits and '-', at most 63 characters, "
    "starting and ending with a letter or digit",
    "^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$": "must be lower-case letters, digits and '-', at most 20 characters, "
    "starting and ending with a letter or digit",
    r"^\S+$": "must not contain spaces",
    "^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$": "must be lower-case letters, digits and '-', at most 32 characters, "
    "starting and ending with a letter or digit",
}


def pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901) from path segments."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "is required"
    if kind == "string_pattern_mismatch":
        pattern = error.get("ctx", {}).get("pattern", "")
        return _PATTERN_MESSAGES.get(pattern, "is not in the expected form")
    if kind in ("value_error", "assertion_error"):
        return str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind == "literal_error":
        return f"must be {error.get('ctx', {}).get('expected', 'one of the allowed values')}"
    return str(error["msg"])


def problems_of(exc: ValidationError, base: Sequence[str | int]) -> list[Problem]:
    """Each pydantic error as a Problem at its JSON pointer under `base`."""
    problems = []
    for error in exc.errors(include_url=False):
        loc = [p for p in error["loc"] if p != "[key]"]
        problems.append(Problem(pointer(*base, *loc), _message(error)))
    return problems


def _sort_key(problem: Problem) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in problem.path.split("/"))


def _parse(raw: Any, problems: list[Problem]) -> dict[str, list[tuple[int, Any]]]:
    """Each section's entries that parsed, with their index in the document."""
    parsed: dict[str, list[tuple[int, Any]]] = {name: [] for name in SECTIONS}
    if not isinstance(raw, dict):
        problems.append(Problem("", "a FleetConfig document is a JSON object"))
        return parsed
    for key in raw:
        if key not in ("version", *SECTIONS):
            problems.append(Problem(pointer(key), "unknown key"))
    if "version" not in raw:
        problems.append(Problem("/version", "is required (the only version is 1)"))
    elif raw["version"] != 1 or isinstance(raw["version"], bool):
        problems.append(Problem("/version", "must be 1"))
    for section, model in SECTIONS.items():
        entries = raw.get(section, [])
        if not isinstance(entries, list):
            problems.append(Problem(pointer(section), "must be a list"))
            continue
        for index, entry in enumerate(entries):
            try:
                parsed[section].append((index, model.model_validate(entry)))
            except ValidationError as exc:
                problems.extend(problems_of(exc, (section, index)))
    return parsed


def _get(value: Any, *keys: str) -> Any:
    """`value[k1][k2]...` of a raw entry, or None where any step is missing or not an object."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _entries(raw: Any, section: str) -> list[tuple[int, dict[str, Any]]]:
    """The raw objects of a section, parsed or not: references are checked on them too."""
    entries = raw.get(section) if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        return []
    return [(i, e) for i, e in enumerate(entries) if isinstance(e, dict)]


def _unique(base: tuple[str | int, ...], entries: list[Any], what: str, problems: list[Problem]) -> None:
    first: dict[str, int] = {}
    for index, entry in enumerate(entries):
        name = _get(entry, "name")
        if not isinstance(name, str):
            continue
        if name in first:
            problems.append(
                Problem(
                    pointer(*base, index, "name"),
                    f"{what} {quote(name)} is named twice (first at {pointer(*base, first[name])})",
                )
            )
        else:
            first[name] = index


def _secret_leaves(value: Any, path: tuple[str | int, ...], inside: bool) -> list[tuple[tuple[str | int, ...], Any]]:
    """Every leaf under a secret-looking key, at any depth (lists and objects included)."""
    if isinstance(value, dict):
        found = []
        for key, item in value.items():
            found += _secret_leaves(item, (*path, key), inside or bool(SECRET_KEY.search(str(key))))
        return found
    if isinstance(value, list):
        return [leaf for i, item in enumerate(value) for leaf in _secret_leaves(item, (*path, i), inside)]
    return [(path, value)] if inside and value is not None and not isinstance(value, bool) else []


def _check_secrets(
    index: int,
    account: ProviderAccountSpec,
    model: type[AccountConfig] | None,
    tenant_id: str,
    problems: list[Problem],
) -> list[tuple[str, str]]:
    """Problems of the account's secrets; returns (pointer, reference) of the well-formed ones.

    With a model, its `SecretRef` fields are the secrets (the model refuses any other key);
    without one, every value under a secret-looking key at any depth must be a reference.
    """
    leaves: list[tuple[tuple[str | int, ...], Any]]
    if model is not None:
        leaves = [((key,), account.config[key]) for key in secret_fields(model) if key in account.config]
    else:
        leaves = _secret_leaves(account.config, (), False)
    references = []
    for keys, value in leaves:
        where = pointer("providerAccounts", index, "config", *keys)
        if not is_reference(value):
            problems.append(Problem(where, "a secret is given as a secret://<tenant>/<id> reference, never as a value"))
        elif parse_reference(value, path=where)[0] != tenant_id:
            problems.append(Problem(where, "the secret reference belongs to another tenant"))
        else:
            references.append((where, value))
    return references


def _config_problems(index: int, config: dict[str, Any], model: type[AccountConfig]) -> list[Problem]:
    """The account's config against its provider's model, each problem under `/providerAccounts/<i>/config`."""
    try:
        model.model_validate(config)
    except ValidationError as exc:
        secrets = set(secret_fields(model))
        found = []
        for problem, error in zip(
            problems_of(exc, ("providerAccounts", index, "config")), exc.errors(include_url=False), strict=True
        ):
            if error["loc"] and error["loc"][0] in secrets and error["type"] != "missing":
                continue  # the secret check says it in its own words
            found.append(problem)
        return found
    return []


async def _missing_secrets(references: list[tuple[str, str]], resolve_secret: SecretResolver) -> list[Problem]:
    """References that name no secret of the tenant (the values are resolved and dropped at once)."""
    problems = []
    for where, reference in references:
        try:
            await resolve_secret(reference)
        except ComputeError as error:
            if error.code is not ErrorCode.NOT_FOUND:
                raise
            problems.append(Problem(where, "no secret of your tenant has this reference: create it first"))
    return problems


def _cross_references(
    raw: Any,
    parsed: dict[str, list[tuple[int, Any]]],
    tenant_id: str,
    providers: Mapping[str, ProviderImpl],
    problems: list[Problem],
    secrets: list[Problem],
    references: list[tuple[str, str]],
    broken: set[str],
) -> None:
    """Names exist and are unique, accounts fit their provider's model (`broken` gets those that do not)."""
    raw_sites, raw_accounts, raw_pools = (_entries(raw, s) for s in SECTIONS)
    for section, what in (("sites", "site"), ("providerAccounts", "provider account"), ("pools", "pool")):
        entries = _get(raw, section)
        if isinstance(entries, list):
            _unique((section,), entries, what, problems)
    sites = {name for _, e in raw_sites if isinstance(name := _get(e, "name"), str)}
    accounts = {name: _get(e, "provider") for _, e in raw_accounts if isinstance(name := _get(e, "name"), str)}
    known = ", ".join(sorted(providers)) or "none"
    for index, account in parsed["providerAccounts"]:
        if account.provider not in providers:
            problems.append(
                Problem(
                    pointer("providerAccounts", index, "provider"),
                    f"no provider definition named {account.provider!r} is configured (known: {known})",
                )
            )
        model = impl.account_config if (impl := providers.get(account.provider)) is not None else None
        if model is not None:
            config_problems = _config_problems(index, account.config, model)
            problems.extend(config_problems)
            if config_problems:
                broken.add(account.name)
        references.extend(_check_secrets(index, account, model, tenant_id, secrets))
        if len(json.dumps(account.config)) > MAX_CONFIG_BYTES:
            problems.append(
                Problem(pointer("providerAccounts", index, "config"), f"a config is at most {MAX_CONFIG_BYTES} bytes")
            )
    adopted: dict[tuple[str, str], str] = {}
    for index, pool in raw_pools:
        site = _get(pool, "site")
        if isinstance(site, str) and site not in sites:
            problems.append(Problem(pointer("pools", index, "site"), f"no site named {quote(site)} in /sites"))
        substrate = _get(pool, "policy", "substrate")
        base = ("pools", index, "policy", "substrate")
        flavors = _get(substrate, "flavors")
        if isinstance(flavors, list):
            _unique((*base, "flavors"), flavors, "flavor", problems)
        account = _get(substrate, "account")
        if not isinstance(account, str):
            continue
        if account not in accounts:
            problems.append(
                Problem(pointer(*base, "account"), f"no provider account named {quote(account)} in /providerAccounts")
            )
        elif (
            isinstance(provider := accounts[account], str)
            and (impl := providers.get(provider)) is not None
            and (impl.kubernetes is None)
        ):
            problems.append(Problem(pointer(*base, "account"), f"provider {impl.name!r} has no Kubernetes support"))
        adopt = _get(substrate, "cluster", "adopt")
        if isinstance(adopt, str):
            if (account, adopt) in adopted:
                problems.append(
                    Problem(
                        pointer(*base, "cluster", "adopt"),
                        f"cluster {quote(adopt)} is already adopted by pool {quote(adopted[(account, adopt)])}: "
                        "one cluster backs one pool",
                    )
                )
            else:
                adopted[(account, adopt)] = str(_get(pool, "name"))


async def _provider_problems(
    parsed: dict[str, list[tuple[int, Any]]],
    tenant_id: str,
    providers: Mapping[str, ProviderImpl],
    resolve_secret: SecretResolver | None,
    broken: set[str],
) -> list[Problem]:
    """Each substrate through its provider's `validate_substrate`, all at once; not those whose
    account does not fit its provider's model (a driver's rules may count on the model's types).

    A hook may report a problem of the account's config under the substrate's
    `account/...` (it only knows the substrate's path); such a problem is moved to
    the account's own entry, `/providerAccounts/<i>/...`, where the operator fixes it.
    """
    accounts = {a.name: (i, a) for i, a in parsed["providerAccounts"]}
    calls: list[Callable[[], Awaitable[list[Problem]]]] = []
    places: list[tuple[str, str]] = []
    accounts_seen: dict[str, int] = {}
    for index, pool in parsed["pools"]:
        substrate = pool.policy.substrate
        found = accounts.get(substrate.account) if substrate is not None else None
        impl = providers.get(found[1].provider) if found is not None else None
        if substrate is None or found is None or impl is None or impl.kubernetes is None or substrate.account in broken:
            continue
        account_index, account = found
        extra = {} if resolve_secret is None else {"resolve_secret": resolve_secret}
        provider_account = ProviderAccount(
            name=account.name, provider=account.provider, tenant_id=tenant_id, config=account.config, **extra
        )
        body = substrate.model_dump(mode="json", by_alias=True, exclude_none=True)
        path = pointer("pools", index, "policy", "substrate")
        calls.append(partial(impl.kubernetes.validate_substrate, provider_account, body, path=path))
        accounts_seen.setdefault(account.name, len(calls) - 1)
        places.append((f"{path}/account/", pointer("providerAccounts", account_index) + "/"))
    # The first substrate of each account goes first: drivers cache what they look up (an
    # instance type's GPUs), and a thousand pools of one account then ask the provider once.
    first = sorted(accounts_seen.values())
    rest = sorted(set(range(len(calls))) - set(first))
    results: list[Any] = [None] * len(calls)
    for batch in (first, rest):
        answers = await asyncio.gather(*(calls[i]() for i in batch), return_exceptions=True)
        for i, answer in zip(batch, answers, strict=True):
            results[i] = answer
    problems: list[Problem] = []
    for result, (under, account_path) in zip(results, places, strict=True):
        if isinstance(result, ComputeError) and result.code is ErrorCode.INVALID_INPUT and result.problems:
            found_problems = list(result.problems)
        elif isinstance(result, BaseException):
            raise result
        else:
            found_problems = result
        problems.extend(
            Problem(account_path + p.path.removeprefix(under), p.message) if p.path.startswith(under) else p
            for p in found_problems
        )
    return problems


async def validate_document(
    raw: Any,
    *,
    tenant_id: str,
    providers: Mapping[str, ProviderImpl],
    resolve_secret: SecretResolver | None = None,
) -> FleetDocument:
    """The parsed document, or ComputeError INVALID_INPUT with every problem found."""
    problems: list[Problem] = []
    secrets: list[Problem] = []
    references: list[tuple[str, str]] = []
    broken: set[str] = set()
    parsed = _parse(raw, problems)
    _cross_references(raw, parsed, tenant_id, providers, problems, secrets, references, broken)
    if resolve_secret is not None:
        secrets.extend(await _missing_secrets(references, resolve_secret))
    from_providers = await _provider_problems(parsed, tenant_id, providers, resolve_secret, broken)
    # A provider's own word on a secret of its account replaces the generic one at that path.
    said = {p.path for p in from_providers}
    problems.extend(p for p in secrets if p.path not in said)
    problems.extend(from_providers)
    if problems:
        raise ComputeError.invalid(sorted(dict.fromkeys(problems), key=_sort_key))
    return FleetDocument(
        version=1,
        sites=[s for _, s in parsed["sites"]],
        providerAccounts=[a for _, a in parsed["providerAccounts"]],
        pools=[p for _, p in parsed["pools"]],
    )
