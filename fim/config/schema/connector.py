"""connectors/*.yaml (kind http or database) and the front matter of skills."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fim.config.schema.base import JSONSchema, Strict, empty_list


class BearerAuth(Strict):
    type: Literal["bearer"]
    """`bearer`: an `Authorization: Bearer <token>` header."""
    token: str
    """The token; use `${VAR}` so it stays out of git."""


class ApiKeyAuth(Strict):
    type: Literal["api_key"]
    """`api_key`: the key in a header or a query parameter."""
    key: str
    """The key; use `${VAR}` so it stays out of git."""
    name: str = "X-API-Key"
    """Header or query parameter name."""
    location: Literal["header", "query"] = "header"
    """Send the key as a `header` or as a `query` parameter."""


class BasicAuth(Strict):
    type: Literal["basic"]
    """`basic`: HTTP basic authentication."""
    username: str
    """User name; `${VAR}` works."""
    password: str
    """Password; use `${VAR}` so it stays out of git."""


Auth = Annotated[BearerAuth | ApiKeyAuth | BasicAuth, Field(discriminator="type")]

Access = Literal["read", "write", "admin"]


def access_for_method(method: str) -> Access:
    """The access level an HTTP method implies: GET, HEAD and OPTIONS read, DELETE is
    admin (irreversible), anything else writes. The one rule for an action that does not
    say `access:` and for `fim connector import`, so a hand-written DELETE is never a read
    that `readonly_guard` lets through; unknown methods fail closed as writes."""
    verb = method.upper()
    if verb in ("GET", "HEAD", "OPTIONS"):
        return "read"
    return "admin" if verb == "DELETE" else "write"


def _access_may_be_omitted(schema: dict[str, Any]) -> None:
    """JSON Schema: `access` is filled from `method` when absent, so it is not required."""
    required = schema.get("required")
    if isinstance(required, list) and "access" in required:
        required.remove("access")
        if not required:
            del schema["required"]


class HttpAction(Strict):
    model_config = ConfigDict(json_schema_extra=_access_may_be_omitted)

    description: str = ""
    """What the action does; the model reads it to choose the action."""
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = "GET"
    """HTTP method."""
    path: str
    """Path below base_url; `{name}` segments are filled from parameters."""
    access: Access
    """`read`, `write` or `admin`; `readonly_guard` blocks write and admin actions, `confirm`
    asks before them. Default by method: `read` for GET and HEAD, `admin` for DELETE,
    `write` for POST, PUT and PATCH; say `access: read` for a POST that only reads."""
    requires_confirmation: bool = False
    """The `confirm` hook asks a human before each call of this action."""
    parameters: JSONSchema = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON Schema of the arguments; path params fill `{...}`, the rest go to the query
    (GET/DELETE/HEAD) or the body. When it names properties, only those are sent (and the
    names its `path`, `query`, `files` and `body_parameter` give): any other argument is
    refused, unless the schema says `additionalProperties` (true or a schema) or
    `patternProperties`. A method-override name (`_method`, `X-HTTP-Method-Override`) is
    refused in the query and every body whatever the schema says."""
    query: list[str] | None = None
    """Parameters sent as query string even on POST/PUT/PATCH."""
    query_style: dict[str, Literal["comma", "space", "pipe"]] = Field(default_factory=dict)
    """How a list argument is written in the query string, by parameter: `comma`
    (`hourly=a,b`, OpenAPI's `style: form, explode: false`), `space` (`spaceDelimited`) or
    `pipe` (`pipeDelimited`); a list not named here repeats the parameter (`hourly=a&hourly=b`).
    `fim connector import` writes it from the spec."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Headers sent with this action's requests (besides the connector's)."""
    tags: list[str] = Field(default_factory=empty_list)
    """Groups (OpenAPI tags): the prompt stub lists actions by tag, `discover` filters on them."""
    body: Literal["json", "form", "multipart", "binary"] = "json"
    """How the non-path, non-query arguments travel: a JSON object, a urlencoded form, a
    multipart form (`files` name its file parts) or raw bytes (`body_parameter`)."""
    body_parameter: str | None = None
    """The one argument that *is* the body (a JSON array body, or base64 bytes of a binary
    upload) instead of the remaining arguments as an object."""
    files: list[str] = Field(default_factory=empty_list)
    """Multipart parts sent as files (base64 content in the argument)."""
    content_type: str | None = None
    """Content-Type of a binary body."""

    @model_validator(mode="before")
    @classmethod
    def _access_follows_method(cls, data: Any) -> Any:
        """An action without `access:` gets the level its method implies (before field
        validation, so the field stays a plain `read|write|admin` for every reader)."""
        if isinstance(data, dict) and "access" not in data:
            method = data.get("method", "GET")
            return {**data, "access": access_for_method(method if isinstance(method, str) else "")}
        return data

    @model_validator(mode="after")
    def _styles_name_parameters(self) -> HttpAction:
        properties = self.parameters.get("properties")
        known = properties if isinstance(properties, dict) else {}
        stray = [name for name in self.query_style if name not in known]
        if stray:
            raise ValueError(
                f"query_style names {', '.join(map(repr, stray))}, which "
                f"{'is not a parameter' if len(stray) == 1 else 'are not parameters'} of "
                f"this action (parameters: {', '.join(known) or 'none'})"
            )
        return self


class HttpConnector(Strict):
    """An HTTP API in connectors/<name>.yaml whose actions become tools."""

    kind: Literal["http"]
    """`http`: a web API whose actions become tools."""
    name: str = ""
    """Connector name (default: the file name); tools are `<name>__<action>`."""
    description: str = ""
    """What the API is; shown to the model in the connector's stub."""
    base_url: str
    """URL the actions' paths are joined to; credentials go to this origin only."""
    auth: Auth | None = None
    """Credentials, by `type`: `bearer` (token), `api_key` (key, name, location) or `basic`."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Headers sent with every request to `base_url`'s origin."""
    timeout: float = 10.0
    """Seconds one request may take."""
    retries: int = 2
    """Retries for idempotent methods (GET, HEAD, PUT, DELETE) on 5xx and connect errors."""
    max_response_chars: int = 20_000
    """Characters of a response the model sees; the rest is cut, saying so."""
    actions: dict[str, HttpAction] = Field(default_factory=dict)
    """Actions by name: each one tool (method, path, parameters)."""


def base_url_problem(url: str) -> str | None:
    """Why `url` cannot be an HTTP connector's `base_url`, or None: every request is sent
    to an absolute `http://` or `https://` URL, so an empty one (`${API_URL:-}` unset) or
    one without a scheme fails every call before anything is sent. One rule for `fim
    validate` (`fim.build.connector_checks`) and the call (`fim.connectors.http`)."""
    text = url.strip()
    if not text:
        return "is empty"
    try:
        parts = urlsplit(text)
        host = parts.hostname
    except ValueError:  # `http://[::1` : a bracket left open
        return "is not a URL"
    if parts.scheme.lower() not in ("http", "https"):
        return "does not start with http:// or https://"
    if not host:
        return "names no host"
    return None


class DatabaseConnector(Strict):
    """A SQL database in connectors/<name>.yaml (any SQLAlchemy URL)."""

    kind: Literal["database"]
    """`database`: a SQL database the model queries."""
    name: str = ""
    """Connector name (default: the file name); hooks see its queries as `<name>__query`."""
    description: str = ""
    """What the database holds; shown to the model in the connector's stub."""
    url: str
    """SQLAlchemy URL (`sqlite:///data/shop.db`, `postgresql://...`); `${VAR}` works."""
    read_only: bool = True
    """Only single read statements run (checked, and a PostgreSQL role that cannot write)."""
    max_rows: int = 200
    """Rows one query returns; the rest are cut, saying so (a workflow node fails)."""
    statement_timeout: float = 10.0
    """Seconds one query may run."""
    max_value_bytes: int = Field(default=1_000_000, gt=0)
    """Bytes one value may have; longer values are cut while fetching (and say so)."""
    max_result_bytes: int = Field(default=8_000_000, gt=0)
    """Bytes one result may have; reading stops there (SQLite also refuses to build a
    single value larger than 4x this, and read-only PostgreSQL withholds a row whose text
    is longer than 4x this)."""
    schemas: list[str] | None = None
    """Schemas to expose (default: the connection's default schema)."""


Connector = Annotated[HttpConnector | DatabaseConnector, Field(discriminator="kind")]


# --------------------------------------------------------------------------- skills


class SkillMeta(BaseModel):
    """Front matter of skills/<name>/SKILL.md (Agent Skills format). Unknown fields such as
    `license` or `metadata` are tolerated so public skills load unchanged."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    name: str = ""
    """Display title; the skill's id is its folder name."""
    description: str
    """When the skill applies; shown as the stub in progressive mode."""
    allowed_tools: list[str] | str | None = Field(default=None, alias="allowed-tools")
    """Tools loaded when `read_skill` opens the skill; Claude's `Bash(git:*), Read` work too."""
