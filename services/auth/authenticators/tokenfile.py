"""Static bearer tokens from --token-auth-file, in kube's CSV format.

    token,user,uid[,"group1,group2"]

The file is read once at start, as kube-apiserver does. Lines starting with #
and empty lines are skipped.
"""
from __future__ import annotations

import csv
import io
import logging

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.common.identity import user_pb

from . import AuthenticationFailed

log = logging.getLogger(__name__)


class TokenFileError(ValueError):
    pass


def parse_token_csv(text: str, path: str = "<memory>") -> dict[str, pb.UserInfo]:
    tokens: dict[str, pb.UserInfo] = {}
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    for number, record in enumerate(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True), 1):
        if not record:
            continue
        if len(record) < 3:
            raise TokenFileError(f"token file '{path}' must have at least 3 columns (token, user name, "
                                 f"user uid), found {len(record)}")
        token, name, uid = record[0], record[1], record[2]
        if not token:
            log.warning("empty token has been found in token file '%s', record number '%d'", path, number)
            continue
        if token in tokens:
            log.warning("duplicate token has been found in token file '%s', record number '%d'", path, number)
        groups = record[3].split(",") if len(record) >= 4 and record[3] else []
        tokens[token] = user_pb(name, groups, uid=uid)
    return tokens


class TokenFileAuthenticator:
    name = "token-file"  # its span's name (services/auth/authenticators/__init__.py)

    def __init__(self, tokens: dict[str, pb.UserInfo]) -> None:
        self.tokens = tokens

    @classmethod
    def from_file(cls, path: str) -> "TokenFileAuthenticator":
        with open(path, encoding="utf-8") as f:
            return cls(parse_token_csv(f.read(), path))

    async def authenticate(self, req: apb.AuthenticateRequest) -> pb.UserInfo | None:
        if not req.token:
            return None
        user = self.tokens.get(req.token)
        if user is None:
            raise AuthenticationFailed("invalid bearer token")
        out = pb.UserInfo()
        out.CopyFrom(user)  # callers append groups; the table stays pristine
        return out
