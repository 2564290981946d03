"""Shared pydantic base: camelCase on the wire, snake_case in Python."""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic import alias_generators


class Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(
        alias_generator=alias_generators.to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
    )

    def wire(self) -> dict[str, Any]:
        """The JSON shape the API server stores (camelCase, absent fields omitted)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
