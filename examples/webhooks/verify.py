"""A receiver's check of tokenops webhook deliveries, both signature schemes, for integrators to
copy: HMAC_SHA256 with the standard library alone, JWS_ES256 with the `cryptography` package.

Function API (raise VerificationError with the reason, return on success):

    verify_hmac(headers, body, secret, now=None)
    verify_jws(headers, body, jwks, registration_id, url, issuer, now=None)  # returns the claims

`headers` is a mapping of header names (any case) to values, `body` the raw request bytes as
they arrived (before any JSON parsing), `jwks` the parsed document of
{base_url}/.well-known/webhook-jwks.json, fetched from tokenops and cached by you.

Command line (exit 0 when valid; 1 with the reason on stderr when not):

    python verify.py hmac --secret=S --headers h.json --body b.bin [--now UNIX]
    python verify.py jws --jwks jwks.json --registration-id ID --url URL --issuer ISS \\
        --headers h.json --body b.bin [--now UNIX]

h.json is a JSON object of header name to value; b.bin the exact body bytes.
"""

import argparse
import base64
import hashlib
import hmac
import json
import re
import sys
import threading
import time

# Spec, HMAC_SHA256 signature rule 2.
TIMESTAMP_TOLERANCE_SECS = 300

_BASE64URL = re.compile(r"^[A-Za-z0-9_-]*$")
_DIGITS = re.compile(r"^-?[0-9]+$")


class VerificationError(Exception):
    """The delivery must be refused; str() says why."""


def _header(headers, name):
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def _required(headers, name):
    value = _header(headers, name)
    if value is None:
        raise VerificationError(f"the {name} header is missing")
    return value


def _timestamp(headers):
    text = _required(headers, "Webhook-Timestamp").strip()
    if not _DIGITS.match(text):
        raise VerificationError("Webhook-Timestamp is not Unix seconds")
    return int(text)


def _now(now):
    return int(time.time()) if now is None else int(now)


def check_content_digest(headers, body):
    """Content-Digest (RFC 9530) must carry sha-256 of the exact body bytes."""
    header = _required(headers, "Content-Digest")
    expected = base64.b64encode(hashlib.sha256(body).digest()).decode("ascii")
    # A dictionary structured field: members `alg=:base64:`, comma separated; only sha-256 is
    # relied on, whatever else a sender adds.
    for member in header.split(","):
        name, _, value = member.strip().partition("=")
        if name.strip().lower() == "sha-256":
            value = value.strip()
            if len(value) < 2 or not (value.startswith(":") and value.endswith(":")):
                raise VerificationError("Content-Digest's sha-256 is not a byte sequence")
            if hmac.compare_digest(value[1:-1].encode("ascii", "replace"), expected.encode("ascii")):
                return
            raise VerificationError("Content-Digest does not match the body")
    raise VerificationError("Content-Digest has no sha-256 member")


def verify_hmac(headers, body, secret, now=None):
    """HMAC_SHA256, the spec's rules 1-5: the timestamp within 300 s of `now`, then any
    `v1,<signature>` pair of Webhook-Signature equal to base64(HMAC-SHA256(secret as UTF-8,
    timestamp + "." + body)), compared in constant time."""
    check_content_digest(headers, body)
    timestamp = _timestamp(headers)
    if abs(_now(now) - timestamp) > TIMESTAMP_TOLERANCE_SECS:
        raise VerificationError(
            f"Webhook-Timestamp is more than {TIMESTAMP_TOLERANCE_SECS} seconds from the receiver's clock"
        )
    parts = [p.strip() for p in _required(headers, "Webhook-Signature").split(",")]
    signatures = [parts[i + 1] for i in range(0, len(parts) - 1, 2) if parts[i] == "v1"]
    if not signatures:
        raise VerificationError("Webhook-Signature has no v1 signature")
    message = str(timestamp).encode("ascii") + b"." + body
    expected = hmac.new(secret.encode("utf-8"), message, hashlib.sha256).digest()
    matched = False
    # Every pair is compared (no early exit) so the time taken does not say which one matched.
    for signature in signatures:
        try:
            candidate = base64.b64decode(signature, validate=True)
        except ValueError:
            candidate = b""
        matched |= hmac.compare_digest(candidate, expected)
    if not matched:
        raise VerificationError("no v1 signature of Webhook-Signature matches")


# jti -> exp of every JWS accepted by this process, kept until it expires: a repeat is a replay.
_seen_jtis = {}
_seen_lock = threading.Lock()


def _b64url_decode(part, what):
    if not _BASE64URL.match(part):
        raise VerificationError(f"the JWS {what} is not unpadded base64url")
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except ValueError:
        raise VerificationError(f"the JWS {what} is not unpadded base64url") from None


def _json_part(part, what):
    try:
        value = json.loads(_b64url_decode(part, what))
    except ValueError:
        raise VerificationError(f"the JWS {what} is not JSON") from None
    if not isinstance(value, dict):
        raise VerificationError(f"the JWS {what} is not a JSON object")
    return value


def _trusted_key(jwks, kid):
    """The P-256 key named `kid` in the receiver's trusted JWKS, or None."""
    from cryptography.hazmat.primitives.asymmetric import ec

    keys = jwks.get("keys") if isinstance(jwks, dict) else None
    for jwk in keys if isinstance(keys, list) else []:
        if not isinstance(jwk, dict) or jwk.get("kid") != kid:
            continue
        if jwk.get("kty") != "EC" or jwk.get("crv") != "P-256":
            return None
        if jwk.get("alg", "ES256") != "ES256" or jwk.get("use", "sig") != "sig":
            return None
        try:
            x = _b64url_decode(jwk.get("x", ""), "key's x")
            y = _b64url_decode(jwk.get("y", ""), "key's y")
        except VerificationError:
            return None
        if len(x) != 32 or len(y) != 32:
            return None
        numbers = ec.EllipticCurvePublicNumbers(int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1())
        try:
            return numbers.public_key()
        except ValueError:
            return None
    return None


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def verify_jws(headers, body, jwks, registration_id, url, issuer, now=None):
    """JWS_ES256, every row of the spec's table: ES256 with a key from the trusted `jwks` (never
    one named or carried by the token), iss = sub = `issuer`, aud = `registration_id`,
    iat = Webhook-Timestamp, not expired, a jti not seen before, htm POST, htu = `url` (the
    registered URL as the registration shows it), body_hash over the raw body. Returns the
    claims."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    check_content_digest(headers, body)
    timestamp = _timestamp(headers)
    current = _now(now)
    parts = _required(headers, "X-JWS-Signature").strip().split(".")
    if len(parts) != 3:
        raise VerificationError("X-JWS-Signature is not a compact JWS (three parts)")
    header_b64, payload_b64, signature_b64 = parts

    header = _json_part(header_b64, "header")
    if header.get("alg") != "ES256":
        raise VerificationError("the JWS algorithm is not ES256")
    for name in ("jku", "x5u", "jwk", "x5c"):
        if name in header:
            raise VerificationError(f"the JWS header carries its own key ({name}); only the trusted key set is used")
    if "crit" in header:
        raise VerificationError("the JWS header has critical extensions this verifier does not know")
    kid = header.get("kid")
    key = _trusted_key(jwks, kid) if isinstance(kid, str) else None
    if key is None:
        raise VerificationError("the JWS kid names no key of the trusted key set")

    raw = _b64url_decode(signature_b64, "signature")
    if len(raw) != 64:
        raise VerificationError("the JWS signature is not a 64-byte ES256 signature")
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    signing_input = f"{header_b64}.{payload_b64}".encode("ascii")
    try:
        key.verify(der, signing_input, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise VerificationError("the JWS signature does not verify") from None

    claims = _json_part(payload_b64, "payload")

    def claim(ok, name):
        if not ok:
            raise VerificationError(f"the JWS claim {name} is wrong")

    claim(claims.get("iss") == issuer, "iss")
    claim(claims.get("sub") == issuer, "sub")
    claim(claims.get("aud") == registration_id, "aud")
    iat, exp = claims.get("iat"), claims.get("exp")
    claim(_is_int(iat) and iat == timestamp, "iat")
    claim(_is_int(exp) and exp > iat, "exp")
    if exp <= current:
        raise VerificationError("the JWS has expired")
    # Issued further ahead than the HMAC tolerance: a clock problem or a forgery.
    claim(iat <= current + TIMESTAMP_TOLERANCE_SECS, "iat")
    jti = claims.get("jti")
    claim(isinstance(jti, str) and jti != "", "jti")
    claim(claims.get("htm") == "POST", "htm")
    claim(claims.get("htu") == url, "htu")
    alg = claims.get("body_hash_alg")
    claim(isinstance(alg, str) and alg.lower() == "sha-256", "body_hash_alg")
    expected = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=")
    body_hash = claims.get("body_hash")
    claim(
        isinstance(body_hash, str) and hmac.compare_digest(body_hash.encode("ascii", "replace"), expected), "body_hash"
    )

    # Recorded only once everything else holds, so a forged token cannot spend a real jti.
    with _seen_lock:
        for seen, until in list(_seen_jtis.items()):
            if until <= current:
                del _seen_jtis[seen]
        if jti in _seen_jtis:
            raise VerificationError("the JWS jti was seen before: a replayed attempt")
        _seen_jtis[jti] = exp
    return claims


def _read_json(path):
    with open(path, "rb") as f:
        return json.load(f)


def _read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def main(argv=None):
    parser = argparse.ArgumentParser(description="Verify one tokenops webhook delivery.")
    schemes = parser.add_subparsers(dest="scheme", required=True)
    for name in ("hmac", "jws"):
        sub = schemes.add_parser(name)
        sub.add_argument("--headers", required=True, help="JSON object: header name to value")
        sub.add_argument("--body", required=True, help="the exact body bytes")
        sub.add_argument("--now", type=int, help="the receiver's clock, Unix seconds (default: now)")
        if name == "hmac":
            sub.add_argument("--secret", required=True)
        else:
            sub.add_argument("--jwks", required=True, help="the trusted JWKS document")
            sub.add_argument("--registration-id", required=True)
            sub.add_argument("--url", required=True, help="the registered URL")
            sub.add_argument("--issuer", required=True, help="the service's public URL")
    args = parser.parse_args(argv)
    headers = _read_json(args.headers)
    if not isinstance(headers, dict):
        parser.error("--headers must hold a JSON object")
    body = _read_bytes(args.body)
    try:
        if args.scheme == "hmac":
            verify_hmac(headers, body, args.secret, now=args.now)
        else:
            jwks = _read_json(args.jwks)
            verify_jws(headers, body, jwks, args.registration_id, args.url, args.issuer, now=args.now)
    except VerificationError as refused:
        print(f"invalid: {refused}", file=sys.stderr)
        return 1
    print("valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
