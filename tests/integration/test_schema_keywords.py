"""JSON Schema as pydantic, zod and the OpenAI SDK write it (issue 36): ranges, multipleOf,
pattern, the formats email/uri/ipv4/ipv6/hostname, tuples (prefixItems), discriminated
unions, min/maxProperties and uniqueItems, each from a schema that pydantic itself wrote
(model_json_schema) where pydantic can; every output that ends with "stop" validates with
the jsonschema package, with pydantic, and with stricter checks of the formats than
jsonschema's own (which skips what it lacks a library for). Also the answer ending at the
value's last character (bug 2: the openai SDK's parse() with a Pydantic model ends with
finish_reason stop, the content with its closing brace) and a tool without parameters
called with {} (bug 3). stories260K (a byte-fallback vocabulary that can spell anything)
in the quick pass; SmolLM2 at several temperatures and seeds is slow-marked, as the other
SmolLM2 generations are."""
import ipaddress
import json
import re
import urllib.parse
from typing import Dict, List, Literal, Optional, Set, Tuple, Union

import jsonschema
import pytest
from pydantic import AnyUrl, BaseModel, Field, UrlConstraints, conint, confloat, constr
from typing_extensions import Annotated
from ipaddress import IPv4Address, IPv6Address

STORIES = "stories260K"
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture(scope="module")
def stories(stories_server):
    return stories_server.client()


@pytest.fixture(scope="module")
def smol(smollm2_server):
    return smollm2_server.client()


# ---- the models -----------------------------------------------------------------------

class Ranges(BaseModel):
    age: int = Field(ge=0, le=120)
    score: float = Field(gt=0, lt=1)
    temp: confloat(ge=-40.5, le=50)
    count: conint(gt=10, lt=20)
    debt: int = Field(le=-5)


class Multiples(BaseModel):
    n: int = Field(multiple_of=5, ge=0, le=100)
    m: conint(multiple_of=3)


class Patterns(BaseModel):
    code: constr(pattern=r"^[A-Z]{3}-\d{3}$")
    zip: str = Field(pattern=r"^\d{5}$")
    slug: constr(pattern=r"^[a-z0-9-]+$", max_length=20)


class Net(BaseModel):
    """(HttpUrl's schema is AnyUrl's with maxLength 2083, as here: its limit to http and
    https is pydantic's alone, not in the schema.)"""
    v4: IPv4Address
    v6: IPv6Address
    site: Annotated[AnyUrl, UrlConstraints(max_length=2083)]
    link: AnyUrl


class Tup(BaseModel):
    point: Tuple[int, str, bool]
    many: Tuple[int, ...] = Field(max_length=4)


class Cat(BaseModel):
    pet_type: Literal["cat"]
    meows: int = Field(ge=0, le=10)


class Dog(BaseModel):
    pet_type: Literal["dog"]
    barks: float = Field(ge=0, le=1)


class Owner(BaseModel):
    pet: Union[Cat, Dog] = Field(discriminator="pet_type")
    name: str = Field(max_length=20)


class Counts(BaseModel):
    scores: Dict[str, int] = Field(min_length=1, max_length=3)
    tags: Set[Literal["a", "b", "c"]]


MODELS = [Ranges, Multiples, Patterns, Net, Tup, Owner, Counts]

# Written by hand as pydantic writes them: EmailStr needs the email-validator package,
# and pydantic has no hostname type.
CONTACT = {"properties": {"email": {"format": "email", "title": "Email", "type": "string"},
                          "host": {"format": "hostname", "title": "Host", "type": "string"},
                          "backup": {"anyOf": [{"format": "email", "type": "string"},
                                               {"type": "null"}], "title": "Backup"}},
           "required": ["email", "host", "backup"], "title": "Contact", "type": "object"}

SCHEMAS = [(m.__name__, m.model_json_schema(), m) for m in MODELS] + [("Contact", CONTACT, None)]


# ---- checking an output -----------------------------------------------------------------

EMAIL = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
                   r"@([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,63}")
LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = re.compile(rf"({LABEL}\.)*{LABEL}")


def _hostname_ok(s):
    return (len(s) <= 253 and HOSTNAME.fullmatch(s) is not None
            and not s.split(".")[-1].isdigit())


def _uri_ok(s):
    u = urllib.parse.urlsplit(s)
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", u.scheme or "") or not u.netloc:
        return False
    host = u.hostname or ""
    try:
        u.port  # raises on a bad port
    except ValueError:
        return False
    if host.startswith("[") or ":" in host:
        ipaddress.IPv6Address(host.strip("[]"))
        return True
    return _hostname_ok(host) or bool(re.fullmatch(r"\d+\.\d+\.\d+\.\d+", host)
                                      and ipaddress.IPv4Address(host))


FORMATS = jsonschema.FormatChecker()
FORMATS.checks("email")(lambda s: not isinstance(s, str) or EMAIL.fullmatch(s) is not None
                        and len(s) <= 254)
FORMATS.checks("hostname")(lambda s: not isinstance(s, str) or _hostname_ok(s))
FORMATS.checks("uri")(lambda s: not isinstance(s, str) or _uri_ok(s))
FORMATS.checks("ipv4", raises=ValueError)(
    lambda s: not isinstance(s, str) or bool(ipaddress.IPv4Address(s)))
FORMATS.checks("ipv6", raises=ValueError)(
    lambda s: not isinstance(s, str) or bool(ipaddress.IPv6Address(s)) and "%" not in s)


def check_output(text, schema, model):
    """The output validates: jsonschema with the format checks above, and pydantic."""
    value = json.loads(text)
    jsonschema.Draft202012Validator(schema, format_checker=FORMATS).validate(value)
    if model is not None:
        model.model_validate_json(text)
    assert text == text.rstrip(), repr(text)  # the answer ends at the value


def run_schemas(client, model_name, temperature, seed, use_chat, max_tokens=300):
    stops = 0
    for name, schema, model in SCHEMAS:
        body = {"max_tokens": max_tokens, "temperature": temperature, "seed": seed}
        if use_chat:
            r = client.chat.completions.create(
                model=model_name, messages=[{"role": "user", "content": f"A {name} as JSON."}],
                response_format={"type": "json_schema",
                                 "json_schema": {"name": name, "schema": schema, "strict": True}},
                **body)
            text, finish = r.choices[0].message.content, r.choices[0].finish_reason
        else:
            r = client.completions.create(model=model_name, prompt="Once",
                                          extra_body={"guided_json": schema}, **body)
            text, finish = r.choices[0].text, r.choices[0].finish_reason
        if finish == "stop":
            stops += 1
            try:
                check_output(text, schema, model)
            except Exception as e:  # name the schema and the text
                raise AssertionError(f"{name} at T={temperature} seed {seed}: {text!r}: {e}")
        else:
            assert finish == "length", (name, finish, text)
    return stops


# ---- the tests ------------------------------------------------------------------------

@pytest.mark.parametrize("temperature,seed", [(0, 0), (1.2, 1), (1.2, 2), (0.7, 3)])
def test_pydantic_schemas_stories(stories, temperature, seed, report):
    """stories260K spells anything: a hostile sampler for the grammars. Every output that
    stops validates."""
    # (its whitespace between tokens is often the most the grammar allows, a
    # character a token, so the larger objects run into its 512-token context)
    stops = run_schemas(stories, STORIES, temperature, seed, use_chat=False, max_tokens=500)
    report(f"schema keywords: {len(SCHEMAS)} pydantic schemas on stories260K at T={temperature} "
           f"seed {seed}: {stops} finished and validate")
    assert stops >= 2


@pytest.mark.slow
@pytest.mark.parametrize("temperature,seed", [(0, 0), (0.7, 1), (1.2, 2), (1.2, 3)])
def test_pydantic_schemas_smollm2(smol, temperature, seed, report):
    stops = run_schemas(smol, SMOLLM2, temperature, seed, use_chat=True)
    report(f"schema keywords: {len(SCHEMAS)} pydantic schemas on SmolLM2 at T={temperature} "
           f"seed {seed}: {stops} finished and validate")
    assert stops >= len(SCHEMAS) - 2


class Person(BaseModel):
    name: str = Field(max_length=30)
    age: int = Field(ge=0, le=120)
    email: Optional[str] = Field(default=None, max_length=40)
    pets: List[Union[Cat, Dog]] = Field(max_length=3)


@pytest.mark.slow
@pytest.mark.parametrize("temperature,seed", [(0, 0), (0.7, 1), (1.2, 2), (1.2, 3)])
def test_openai_parse_ends_at_brace(smol, temperature, seed):
    """Bug 2: the official client's parse() with a Pydantic model ends with finish_reason
    "stop" and a parsed object, the content ending with the closing brace (on main a
    newline or tabs followed it, up to max_tokens at high temperatures)."""
    parse = getattr(smol.chat.completions, "parse", None) or smol.beta.chat.completions.parse
    r = parse(model=SMOLLM2, messages=[{"role": "user", "content": "A person with pets."}],
              response_format=Person, max_tokens=400, temperature=temperature, seed=seed)
    c = r.choices[0]
    assert c.finish_reason == "stop" and isinstance(c.message.parsed, Person), c
    assert c.message.content.endswith("}"), repr(c.message.content)


@pytest.mark.slow
def test_tool_without_parameters(smol):
    """Bug 3: a function without parameters takes none; its arguments are {}."""
    tools = [{"type": "function", "function": {"name": "now", "description": "The time"}}]
    for seed in range(3):
        r = smol.chat.completions.create(
            model=SMOLLM2, messages=[{"role": "user", "content": "What time is it? Use x=1."}],
            tools=tools, tool_choice="required", max_tokens=120, temperature=1.2, seed=seed)
        c = r.choices[0]
        if c.finish_reason == "length":
            continue
        assert c.finish_reason == "tool_calls", c
        for t in c.message.tool_calls:
            assert t.function.name == "now" and json.loads(t.function.arguments) == {}, t


def test_grammar_refuses_past_bounds(stories_server):
    """Schemas whose keywords brisk cannot express exactly are a 400 naming the keyword."""
    for schema, needle in [
            ({"type": "array", "items": {"type": "string"}, "uniqueItems": True},
             "'uniqueItems'"),
            ({"type": "integer", "multipleOf": 0.1}, "'multipleOf'"),
            ({"type": "object", "patternProperties": {"^a": {}}}, "'patternProperties'"),
            ({"type": "string", "format": "uri", "maxLength": 100}, "'maxLength'"),
            ({"type": "string", "pattern": "^[a-z]+$", "minLength": 3}, "'minLength'")]:
        r = stories_server.request("POST", "/v1/completions",
                                   {"prompt": "Once", "max_tokens": 4, "guided_json": schema})
        assert r.status == 400, (schema, r.body)
        err = r.json()["error"]
        assert err["code"] == "invalid_schema" and needle in err["message"], err
