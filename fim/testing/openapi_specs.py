"""Realistic generated OpenAPI 3 documents for tests and benchmarks.

Real public specs are large (GitHub's is 13 MB); generating one of any size lets tests and
`bench/openapi_import.py` check import speed and discovery bounds on documents shaped like
them: tags, long operationIds, shared `$ref` schemas, vendor `x-` keys, JSON/multipart/binary
and array bodies, server variables.
"""

from __future__ import annotations

from typing import Any


def generated_spec(operations: int, *, tags: int = 40) -> dict[str, Any]:
    """An OpenAPI 3.0 document with `operations` operations (4 per path) over `tags` tags."""
    schemas: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for i in range((operations + 3) // 4):
        tag = f"area{i % tags}"
        model = f"Resource{i}"
        schemas[model] = {
            "type": "object",
            "x-github-breaking-changes": [{"changeset": "x"}],
            "required": ["id", "name"],
            "properties": {
                "id": {"type": "integer", "description": "Unique identifier."},
                "name": {"type": "string", "example": "octo", "x-internal": True},
                "owner": {"$ref": "#/components/schemas/Owner"},
                "labels": {"type": "array", "items": {"type": "string"}},
                "state": {"type": "string", "enum": ["open", "closed"], "nullable": True},
            },
        }
        ref = {"$ref": f"#/components/schemas/{model}"}
        base = f"/repos/{{owner}}/{{repo}}/{tag}/resource-{i}"
        owner = {"name": "owner", "in": "path", "required": True, "schema": {"type": "string"}}
        repo = {"name": "repo", "in": "path", "required": True, "schema": {"type": "string"}}
        ops = {
            "get": {
                "tags": [tag],
                "operationId": f"{tag}/list-resources-for-authenticated-user-in-repository-{i}",
                "summary": f"List resource {i} of a repository. Paginated.",
                "parameters": [
                    {"name": "per_page", "in": "query", "schema": {"type": "integer"}},
                    {"name": "X-GitHub-Api-Version", "in": "header", "schema": {"type": "string"}},
                ],
                "x-github": {"githubCloudOnly": False, "category": tag},
                "responses": {"200": {"description": "OK"}},
            },
            "post": {
                "tags": [tag],
                "operationId": f"{tag}/create-resource-{i}",
                "summary": f"Create resource {i}.",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": ref}},
                },
                "responses": {"201": {"description": "Created"}},
            },
            "put": {
                "tags": [tag],
                "operationId": f"{tag}/upload-resource-asset-{i}",
                "summary": f"Upload an asset for resource {i}.",
                "requestBody": {
                    "content": {
                        "multipart/form-data": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "file": {"type": "string", "format": "binary"},
                                    "label": {"type": "string"},
                                },
                            }
                        }
                    }
                },
                "responses": {"200": {"description": "OK"}},
            },
            "patch": {
                "tags": [tag],
                "operationId": f"{tag}/set-resource-labels-{i}",
                "summary": f"Replace the labels of resource {i}.",
                "requestBody": {
                    "content": {
                        "application/json": {
                            "schema": {"type": "array", "items": {"type": "string"}}
                        }
                    }
                },
                "responses": {"200": {"description": "OK"}},
            },
        }
        paths[base] = {"parameters": [owner, repo], **ops}
    schemas["Owner"] = {"type": "object", "properties": {"login": {"type": "string"}}}
    return {
        "openapi": "3.0.3",
        "info": {"title": f"Generated API ({operations} operations)", "version": "1.0"},
        "servers": [
            {
                "url": "https://{host}/api/{version}",
                "variables": {"host": {"default": "api.example.com"}, "version": {"default": "v3"}},
            }
        ],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


__all__ = ["generated_spec"]
