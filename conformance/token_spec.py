"""Reward tokens, implemented from docs/spec/reward-token.md alone (no Rust read).

`python3 conformance/token_spec.py --write` regenerates
docs/spec/vectors/reward-token.json; without `--write` it checks the checked-in file
against this implementation (both ways: every vector re-derived, every sealed token
opened). The Rust tests (sdk/tests/token_vectors.rs) open the same vectors, and the
conformance suite (conformance/test_contract.py) opens tokens a live service's SDK
sealed. Needs the `cryptography` package.
"""

from __future__ import annotations

import base64
import json
import struct
import sys
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

VECTORS = Path(__file__).resolve().parent.parent / "docs" / "spec" / "vectors" / "reward-token.json"
SALT = b"reward-token/v1"
PERIOD_MS = 60_000
HEADER_LEN = 19
TAG_LEN = 16

# RewardToken fields: (number, name, kind) in field-number order.
FIELDS = [
    (1, "trade_no", "string"),
    (2, "user_id", "string"),
    (3, "activity_id", "string"),
    (4, "scene_id", "string"),
    (5, "reward_type", "string"),
    (6, "amount", "int64"),
    (7, "grant_time_ms", "int64"),
    (8, "description", "string"),
    (9, "expires_at_ms", "int64"),
    (10, "app_id", "string"),
]


class Illegal(Exception):
    """Why a token does not open: bad_base64, truncated, bad_version, unknown_key,
    forged, bad_protobuf, binding_mismatch."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 as two's complement, 10 bytes when negative
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_token(t: dict) -> bytes:
    """Proto3 encoding, fields in number order, defaults (empty, 0) left out."""
    out = bytearray()
    for number, name, kind in FIELDS:
        v = t.get(name, "" if kind == "string" else 0)
        if kind == "string" and v:
            b = v.encode("utf-8")
            out += varint(number << 3 | 2) + varint(len(b)) + b
        elif kind == "int64" and v:
            out += varint(number << 3) + varint(v)
    return bytes(out)


def read_varint(b: bytes, at: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if at >= len(b) or shift > 63:
            raise Illegal("bad_protobuf")
        c = b[at]
        at += 1
        n |= (c & 0x7F) << shift
        if c < 0x80:
            return n, at
        shift += 7


def decode_token(b: bytes) -> dict:
    """A tolerant proto3 reader: any field order, unknown fields skipped."""
    names = {number: (name, kind) for number, name, kind in FIELDS}
    t = {name: ("" if kind == "string" else 0) for _, name, kind in FIELDS}
    at = 0
    while at < len(b):
        key, at = read_varint(b, at)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Illegal("bad_protobuf")
        if wire == 0:
            v, at = read_varint(b, at)
            if number in names and names[number][1] == "int64":
                t[names[number][0]] = v - (1 << 64) if v >= 1 << 63 else v
            elif number in names:
                raise Illegal("bad_protobuf")
        elif wire == 2:
            n, at = read_varint(b, at)
            if at + n > len(b):
                raise Illegal("bad_protobuf")
            raw = b[at : at + n]
            at += n
            if number in names:
                if names[number][1] != "string":
                    raise Illegal("bad_protobuf")
                try:
                    t[names[number][0]] = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise Illegal("bad_protobuf") from e
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise Illegal("bad_protobuf")
        if at > len(b):
            raise Illegal("bad_protobuf")
    return t


def subkey(master: bytes, key_id: int, period: int) -> bytes:
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=SALT, info=struct.pack(">HI", key_id, period)
    ).derive(master)


def aad(version: int, header: bytes, user_id: str, activity_id: str) -> bytes:
    u, a = user_id.encode("utf-8"), activity_id.encode("utf-8")
    if version == 1:
        return header + struct.pack(">I", len(u)) + u + struct.pack(">I", len(a)) + a
    return varint(len(u)) + u + varint(len(a)) + a


def seal(
    ring: dict[int, bytes],
    key_id: int,
    seal_ms: int,
    nonce: bytes,
    plaintext: bytes,
    user_id: str,
    activity_id: str,
    version: int = 2,
) -> str:
    period = seal_ms // PERIOD_MS
    header = bytes([version]) + struct.pack(">HI", key_id, period) + nonce
    sealed = AESGCM(subkey(ring[key_id], key_id, period)).encrypt(
        nonce, plaintext, aad(version, header, user_id, activity_id)
    )
    return base64.urlsafe_b64encode(header + sealed).decode().rstrip("=")


def open_token(ring: dict[int, bytes], sealed: str, user_id: str, activity_id: str) -> dict:
    text = sealed.rstrip("=")
    if any(c not in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_" for c in text):
        raise Illegal("bad_base64")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as e:
        raise Illegal("bad_base64") from e
    if len(text) % 4 == 1:
        raise Illegal("bad_base64")
    # Canonical only: the unused low bits of the last character must be zero.
    if base64.urlsafe_b64encode(raw).decode().rstrip("=") != text:
        raise Illegal("bad_base64")
    if len(raw) < HEADER_LEN + TAG_LEN:
        raise Illegal("truncated")
    version = raw[0]
    if version not in (1, 2):
        raise Illegal("bad_version")
    key_id, period = struct.unpack(">HI", raw[1:7])
    if key_id not in ring:
        raise Illegal("unknown_key")
    header, body = raw[:HEADER_LEN], raw[HEADER_LEN:]
    try:
        plaintext = AESGCM(subkey(ring[key_id], key_id, period)).decrypt(
            raw[7:HEADER_LEN], body, aad(version, header, user_id, activity_id)
        )
    except Exception as e:  # cryptography's InvalidTag
        raise Illegal("forged") from e
    token = decode_token(plaintext)
    if token["user_id"] != user_id or token["activity_id"] != activity_id:
        raise Illegal("binding_mismatch")
    return token


# Test keys, used nowhere else.
RING = {
    1: bytes(range(32)),
    7: bytes.fromhex("c3" * 16 + "5a" * 16),
}

TOKEN = {
    "trade_no": "cny2027:rain:r20:u42",
    "user_id": "u42",
    "activity_id": "cny2027",
    "scene_id": "rain",
    "reward_type": "cash",
    "amount": 888,
    "grant_time_ms": 1_800_000_000_123,
    "description": "8.88 元 from the 20:00 rain",
    "expires_at_ms": 1_800_604_800_000,
    "app_id": "wallet-app",
}


def cases() -> list[dict]:
    long_ids = dict(TOKEN, user_id="u" * 64, activity_id="a" * 64, trade_no="t" * 200, scene_id="s" * 64)
    minimal = {"trade_no": "m1", "user_id": "u1", "activity_id": "act", "reward_type": "coin", "amount": 1}
    negative = dict(TOKEN, amount=-5)
    out = []

    def add(name, token, key_id=1, seal_ms=1_800_000_000_123, nonce=bytes(range(100, 112)), version=2,
            open_as=None, seal_as=None, plaintext=None, mutate=None, expect="ok", ring=None):
        ring = ring or RING
        pt = plaintext if plaintext is not None else encode_token(token)
        sa = seal_as or (token.get("user_id", ""), token.get("activity_id", ""))
        sealed = seal(ring, key_id, seal_ms, nonce, pt, sa[0], sa[1], version)
        if mutate:
            sealed = mutate(sealed)
        oa = open_as or sa
        period = seal_ms // PERIOD_MS
        header = bytes([version]) + struct.pack(">HI", key_id, period) + nonce
        case = {
            "name": name,
            "version": version,
            "key_id": key_id,
            "seal_ms": seal_ms,
            "period": period,
            "nonce_hex": nonce.hex(),
            "token": token,
            "plaintext_hex": pt.hex(),
            "subkey_hex": subkey(ring[key_id], key_id, period).hex() if key_id in ring else "",
            "aad_hex": aad(version, header, sa[0], sa[1]).hex(),
            "sealed": sealed,
            "open_as": {"user_id": oa[0], "activity_id": oa[1]},
            "expect": expect,
        }
        out.append(case)

    add("full token, version 2", TOKEN)
    add("only the required fields", minimal, nonce=bytes(12))
    add("ids at their longest", long_ids, key_id=7, seal_ms=1_799_999_999_999)
    add("negative amount (int64 as 10 bytes)", negative)
    add("version 1 (header in the AAD, 4-byte lengths)", TOKEN, version=1)
    add("presented for another user", TOKEN, open_as=("u43", TOKEN["activity_id"]), expect="forged")
    add("presented for another activity", TOKEN, open_as=(TOKEN["user_id"], "cny2028"), expect="forged")

    def flip(sealed: str) -> str:
        raw = bytearray(base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4)))
        raw[HEADER_LEN + 3] ^= 0x01
        return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")

    def period_plus_one(sealed: str) -> str:
        raw = bytearray(base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4)))
        raw[6] ^= 0x01
        return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")

    def as_version_one(sealed: str) -> str:
        raw = bytearray(base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4)))
        raw[0] = 1
        return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")

    add("one ciphertext bit flipped", TOKEN, mutate=flip, expect="forged")
    add("period changed", TOKEN, mutate=period_plus_one, expect="forged")
    add("version byte turned to 1", TOKEN, mutate=as_version_one, expect="forged")
    add("sealed under a key the ring lacks", TOKEN, key_id=9, ring={**RING, 9: bytes(32)}, expect="unknown_key")
    add("version 3", TOKEN, mutate=lambda s: _with_byte(s, 0, 3), expect="bad_version")
    add("truncated to 34 bytes", TOKEN, mutate=lambda s: _truncate(s, 34), expect="truncated")
    add("not base64url", TOKEN, mutate=lambda s: s[:10] + "+/" + s[12:], expect="bad_base64")
    # A token whose byte length is not a multiple of 3 ends in a character with unused
    # low bits; setting one decodes to the same bytes in a lax decoder.
    odd = next(t for t in (TOKEN, minimal, negative) if (HEADER_LEN + len(encode_token(t)) + TAG_LEN) % 3)
    add("non-canonical base64 (an unused bit set)", odd, mutate=_unused_bit, expect="bad_base64")
    add("authentic, but the plaintext is no RewardToken", TOKEN, plaintext=b"\xff\xff\xff", expect="bad_protobuf")
    add(
        "authentic for u43, but the token names u42",
        TOKEN,
        seal_as=("u43", TOKEN["activity_id"]),
        expect="binding_mismatch",
    )
    return out


ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _unused_bit(sealed: str) -> str:
    return sealed[:-1] + ALPHABET[ALPHABET.index(sealed[-1]) | 1]


def _with_byte(sealed: str, at: int, value: int) -> str:
    raw = bytearray(base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4)))
    raw[at] = value
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


def _truncate(sealed: str, n: int) -> str:
    raw = base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4))
    return base64.urlsafe_b64encode(raw[:n]).decode().rstrip("=")


def document() -> dict:
    return {
        "spec": "docs/spec/reward-token.md",
        "ring": [{"id": k, "key_hex": v.hex()} for k, v in sorted(RING.items())],
        "cases": cases(),
    }


def check(doc: dict) -> list[str]:
    """Every case of `doc` opens (or is refused) as it says, with this implementation."""
    ring = {k["id"]: bytes.fromhex(k["key_hex"]) for k in doc["ring"]}
    problems = []
    for c in doc["cases"]:
        try:
            got = open_token(ring, c["sealed"], c["open_as"]["user_id"], c["open_as"]["activity_id"])
            outcome = "ok"
            if got != decode_token(bytes.fromhex(c["plaintext_hex"])):
                problems.append(f"{c['name']}: opened to {got}")
        except Illegal as e:
            outcome = e.kind
        if outcome != c["expect"]:
            problems.append(f"{c['name']}: {outcome}, expected {c['expect']}")
    return problems


def main() -> int:
    doc = document()
    if "--write" in sys.argv:
        VECTORS.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {VECTORS} ({len(doc['cases'])} cases)")
        return 0
    stored = json.loads(VECTORS.read_text(encoding="utf-8"))
    problems = check(stored)
    # Random-free: the stored file is exactly what this implementation derives.
    if stored != doc:
        problems.append(f"{VECTORS} differs from what token_spec.py derives (run it with --write)")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{len(stored['cases'])} token vectors: {'ok' if not problems else 'FAILED'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
