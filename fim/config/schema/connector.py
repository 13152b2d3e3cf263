"""connectors/*.yaml (kind http or database) and the front matter of skills."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from fim.config.schema.base import JSONSchema, Strict


class BearerAuth(Strict):
    type: Literal["bearer"]
    token: str


class ApiKeyAuth(Strict):
    type: Literal["api_key"]
    key: str
    name: str = "X-API-Key"
    """Header or query parameter name."""
    location: Literal["header", "query"] = "header"


class BasicAuth(Strict):
    type: Literal["basic"]
    username: str
    password: str


Auth = Annotated[BearerAuth | ApiKeyAuth | BasicAuth, Field(discriminator="type")]


class HttpAction(Strict):
    description: str = ""
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = "GET"
    path: str
    """Path below base_url; `{name}` segments are filled from parameters."""
    access: Literal["read", "write", "admin"] = "read"
    requires_confirmation: bool = False
    parameters: JSONSchema = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON Schema of the arguments; path params fill `{...}`, the rest go to the query
    (GET/DELETE/HEAD) or the JSON body."""
    query: list[str] | None = None
    """Parameters sent as query string even on POST/PUT/PATCH."""
    headers: dict[str, str] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    """Groups (OpenAPI tags): the prompt stub lists actions by tag, `discover` filters on them."""
    body: Literal["json", "form", "multipart", "binary"] = "json"
    """How the non-path, non-query arguments travel: a JSON object, a urlencoded form, a
    multipart form (`files` name its file parts) or raw bytes (`body_parameter`)."""
    body_parameter: str | None = None
    """The one argument that *is* the body (a JSON array body, or base64 bytes of a binary
    upload) instead of the remaining arguments as an object."""
    files: list[str] = Field(default_factory=list)
    """Multipart parts sent as files (base64 content in the argument)."""
    content_type: str | None = None
    """Content-Type of a binary body."""


class HttpConnector(Strict):
    """An HTTP API in connectors/<name>.yaml whose actions become tools."""

    kind: Literal["http"]
    name: str = ""
    description: str = ""
    base_url: str
    auth: Auth | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = 10.0
    retries: int = 2
    """Retries for idempotent methods (GET, HEAD, PUT, DELETE) on 5xx and connect errors."""
    max_response_chars: int = 20_000
    actions: dict[str, HttpAction] = Field(default_factory=dict)


class DatabaseConnector(Strict):
    """A SQL database in connectors/<name>.yaml (any SQLAlchemy URL)."""

    kind: Literal["database"]
    name: str = ""
    description: str = ""
    url: str
    read_only: bool = True
    max_rows: int = 200
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
    description: str
    """When the skill applies; shown as the stub in progressive mode."""
    allowed_tools: list[str] | str | None = Field(default=None, alias="allowed-tools")
