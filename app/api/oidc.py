"""Bearer JWTs from an OpenID Connect identity provider (optional; docs/security.md).

A JWT is accepted when its signature checks against the provider's JWKS
(fetched from ``GPUQ_OIDC_JWKS_URL`` and cached, or read from
``GPUQ_OIDC_JWKS_FILE``), its ``iss`` and ``aud`` are the configured ones
and it has not expired. Its groups claim (``GPUQ_OIDC_GROUPS_CLAIM``,
default ``groups``) then picks a scope through ``GPUQ_OIDC_GROUP_SCOPES``
(``{"platform-admins": "admin", "ml-nlp": "team:nlp"}``): the first group of
that map, in its order, that the token holds. The subject becomes the
``submitted_by`` of the caller's jobs (``oidc:<sub>``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jwt

from app.domain.errors import Forbidden, GpuqError
from app.domain.principal import Principal, parse_scope


class Unauthorized(GpuqError):
    status_code = 401


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts, the first a JSON header (``eyJ`` = ``{"``)."""
    return token.count(".") == 2 and token.startswith("eyJ")


class OidcVerifier:
    """Turns a provider's JWT into a :class:`Principal` (or refuses it)."""

    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        group_scopes: Mapping[str, str],
        jwks_url: str | None = None,
        jwks: Mapping[str, Any] | None = None,
        groups_claim: str = "groups",
        algorithms: Sequence[str] = ("RS256", "ES256"),
        leeway_s: float = 30.0,
    ) -> None:
        if (jwks_url is None) == (jwks is None):
            raise ValueError("OIDC needs exactly one of a JWKS URL or a JWKS file")
        for group, scope in group_scopes.items():
            parse_scope(scope, f"GPUQ_OIDC_GROUP_SCOPES[{group}]")
        self.issuer = issuer
        self.audience = audience
        self.group_scopes = dict(group_scopes)
        self.groups_claim = groups_claim
        self.algorithms = list(algorithms)
        self.leeway_s = leeway_s
        self._client = jwt.PyJWKClient(jwks_url, lifespan=300) if jwks_url else None
        self._keys = jwt.PyJWKSet.from_dict(dict(jwks)) if jwks is not None else None

    @classmethod
    def from_settings(cls, settings: Any) -> OidcVerifier | None:
        """The verifier ``GPUQ_OIDC_*`` describe, or None when OIDC is off."""
        if not settings.oidc_issuer:
            return None
        jwks = None
        if settings.oidc_jwks_file:
            jwks = json.loads(Path(settings.oidc_jwks_file).read_text())
        return cls(
            issuer=settings.oidc_issuer,
            audience=settings.oidc_audience or "gpuq",
            group_scopes=settings.oidc_group_scopes,
            jwks_url=settings.oidc_jwks_url,
            jwks=jwks,
            groups_claim=settings.oidc_groups_claim,
        )

    def _key(self, token: str) -> Any:
        try:
            if self._client is not None:
                return self._client.get_signing_key_from_jwt(token).key
            kid = jwt.get_unverified_header(token).get("kid")
            assert self._keys is not None
            keys = [k for k in self._keys.keys if kid is None or k.key_id == kid]
            if not keys:
                raise Unauthorized(f"no key {kid!r} in the identity provider's JWKS",
                                   "Authorization")
            return keys[0].key
        except jwt.PyJWTError as e:
            raise Unauthorized(f"JWT refused: {e}", "Authorization") from None

    def principal(self, token: str) -> Principal:
        key = self._key(token)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as e:
            raise Unauthorized(f"JWT refused: {e}", "Authorization") from None
        raw = claims.get(self.groups_claim) or []
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not all(
                isinstance(g, str | int) and not isinstance(g, bool) for g in raw):
            # a number or an object is no group list (iterating it was a 500); numeric
            # group ids in a list are read as their decimal text, as before
            raise Unauthorized(
                f"the token's {self.groups_claim} claim must be a string or a list of "
                f"strings, not {type(raw).__name__}"
                + (" holding other values" if isinstance(raw, list) else ""), "Authorization")
        groups = {str(g) for g in raw}
        for group, scope in self.group_scopes.items():
            if group in groups:
                return Principal.from_scope(scope, f"oidc:{claims['sub']}")
        raise Forbidden(
            f"none of the token's {self.groups_claim} is mapped to a gpuq scope",
            "Authorization",
        )
