#!/usr/bin/env python3
"""Checks tokenops' OpenAPI document the way an integrator meets it.

Against a running service: fetches /openapi.json, validates it with openapi-spec-validator,
generates a client with openapi-python-client and uses that generated client, and nothing else,
for a real session: the platform operator's token from the token endpoint, a new organisation,
its owner's sign-in through the NEW_PASSWORD_REQUIRED challenge (the temporary password comes
from the mail outbox), then a customer registered and read back, and one list of each paging
style. Every parsed response must hold no member the document does not declare. Then real
responses, read without the generated client (a script with a default of each scalar type, a
customer, a page of customers, the caller's profile, …), are validated against the document's own
response schemas with openapi-schema-validator, formats included.

Run by crates/tokenops/tests/behaviour/openapi_client.rs with the virtualenv scripts/test
prepares (scripts/openapi-client-requirements.txt). Exits non-zero on the first failure.

    openapi_client_check.py --base-url URL --data-dir DIR --work-dir DIR
"""

import argparse
import importlib
import json
import subprocess
import sys
import time
import urllib.request
import uuid
from decimal import Decimal
from pathlib import Path

PACKAGE = "tokenops_client"
OWNER_EMAIL = "owner@python-client.example"
NEW_PASSWORD = "Correct-Horse-42"


def step(text):
    print(f"[openapi-client] {text}", flush=True)


def fetch_document(base_url, work):
    with urllib.request.urlopen(f"{base_url}/openapi.json", timeout=10) as reply:
        document = json.load(reply)
    path = work / "openapi.json"
    path.write_text(json.dumps(document, indent=1))
    return document, path


def validate(document):
    from openapi_spec_validator import validate as validate_spec

    assert document["openapi"].startswith("3.1"), document["openapi"]
    validate_spec(document)
    step(f"valid OpenAPI {document['openapi']}, API version {document['info']['version']}")


def generate(document_path, work):
    config = work / "generator.yaml"
    # No post hooks: they would run ruff from PATH, and formatting proves nothing here.
    config.write_text(f"project_name_override: {PACKAGE}\npackage_name_override: {PACKAGE}\npost_hooks: []\n")
    output = work / PACKAGE
    command = [
        sys.executable,
        "-m",
        "openapi_python_client",
        "generate",
        "--path",
        str(document_path),
        "--config",
        str(config),
        "--output-path",
        str(output),
        "--meta",
        "none",
        "--overwrite",
    ]
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    report = run.stdout + run.stderr
    if run.returncode != 0:
        sys.exit(f"openapi-python-client failed ({run.returncode}):\n{report}")
    # A warning means an operation or schema the generator could not turn into code: the
    # client would silently lack it.
    if "warning" in report.lower():
        sys.exit(f"openapi-python-client reported problems with the document:\n{report}")
    sys.path.insert(0, str(work))
    step(f"generated {PACKAGE} in {output}")
    return importlib.import_module(PACKAGE)


def undocumented(value, path="response"):
    """Members the service sent that the document does not declare, anywhere in a parsed model."""
    import attrs

    found = []
    if isinstance(value, list):
        for i, item in enumerate(value):
            found += undocumented(item, f"{path}[{i}]")
    elif attrs.has(type(value)):
        declared = [f for f in attrs.fields(type(value)) if f.name != "additional_properties"]
        # A model with no declared member is a free-form object (audit detail, event data).
        if declared:
            found += [f"{path}.{name}" for name in getattr(value, "additional_properties", None) or {}]
        for field in declared:
            found += undocumented(getattr(value, field.name), f"{path}.{field.name}")
    return found


def parsed(reply, status, model, what):
    """The parsed body of a detailed reply with the expected status and model."""
    assert reply.status_code == status, f"{what}: {reply.status_code} {reply.content!r}"
    body = reply.parsed
    assert isinstance(body, model), f"{what}: parsed as {type(body).__name__}, not {model.__name__}: {reply.content!r}"
    extra = undocumented(body)
    assert not extra, f"{what}: members the document does not declare: {extra}"
    return body


def temporary_password(data_dir, email, timeout=30.0):
    """The temporary password of the invitation to `email`, once a worker has delivered it."""
    deadline = time.monotonic() + timeout
    outbox = data_dir / "outbox"
    while time.monotonic() < deadline:
        for mail in sorted(outbox.glob("*.eml")) if outbox.is_dir() else []:
            text = mail.read_text(errors="replace")
            to = [line[3:].strip().strip("<>") for line in text.splitlines() if line.startswith("To:")]
            if email.lower() in (t.lower() for t in to):
                for line in text.splitlines():
                    if line.startswith("Temporary password: "):
                        return line.removeprefix("Temporary password: ").strip()
        time.sleep(0.1)
    sys.exit(f"no invitation to {email} in {outbox} within {timeout} s")


def session(client_package, base_url, data_dir, version):
    c = client_package
    # The generated package exists only now.
    from tokenops_client import models as m
    from tokenops_client.api.audit import audit_events_list
    from tokenops_client.api.auth import auth_login, auth_new_password
    from tokenops_client.api.customers import customers_create, customers_get, customers_list, customers_update
    from tokenops_client.api.idp import idp_token
    from tokenops_client.api.organisation import tenants_create, users_me
    from tokenops_client.api.roles import roles_get, roles_list
    from tokenops_client.api.transactions import transactions_list
    from tokenops_client.api.webhook_events import webhook_events_list
    from tokenops_client.types import UNSET

    anonymous = c.Client(base_url=base_url, raise_on_unexpected_status=True)

    credentials = json.loads((data_dir / "operator-credentials.json").read_text())
    form = m.TokenRequest(
        grant_type=m.GrantType.CLIENT_CREDENTIALS,
        client_id=credentials["clientId"],
        client_secret=credentials["clientSecret"],
    )
    issued = parsed(idp_token.sync_detailed(client=anonymous, body=form), 200, m.TokenResponse, "token endpoint")
    assert issued.token_type == "Bearer" and issued.expires_in > 0, issued
    operator = c.AuthenticatedClient(base_url=base_url, token=issued.access_token, raise_on_unexpected_status=True)
    step("operator token from /idp/oauth2/token")

    organisation = parsed(
        tenants_create.sync_detailed(
            client=operator,
            body=m.TenantIn(
                name="Bank of Generated Clients",
                owner=m.OwnerIn(email=OWNER_EMAIL, first_name="Pia", last_name="Python"),
            ),
            api_version=version,
            idempotency_key=str(uuid.uuid4()),
        ),
        201,
        m.OrganisationOut,
        "create organisation",
    )
    assert organisation.owner.status == "INVITED" and organisation.owner.role == "SUPER_ADMIN", organisation
    step(f"organisation {organisation.id} created; owner invited")

    temporary = temporary_password(data_dir, OWNER_EMAIL)
    challenged = parsed(
        auth_login.sync_detailed(
            client=anonymous, body=m.LoginIn(email=OWNER_EMAIL, password=temporary), api_version=version
        ),
        200,
        m.PasswordChallenge,
        "login with the temporary password",
    )
    assert challenged.challenge == m.Challenge.NEW_PASSWORD_REQUIRED, challenged
    signed_in = parsed(
        auth_new_password.sync_detailed(
            client=anonymous,
            body=m.NewPasswordIn(email=OWNER_EMAIL, new_password=NEW_PASSWORD, session=challenged.session),
            api_version=version,
        ),
        200,
        m.SignedIn,
        "new password",
    )
    assert signed_in.token_type == m.TokenType.BEARER and signed_in.refresh_token, signed_in
    again = parsed(
        auth_login.sync_detailed(
            client=anonymous, body=m.LoginIn(email=OWNER_EMAIL, password=NEW_PASSWORD), api_version=version
        ),
        200,
        m.SignedIn,
        "login with the new password",
    )
    owner = c.AuthenticatedClient(base_url=base_url, token=again.access_token, raise_on_unexpected_status=True)
    me = parsed(users_me.sync_detailed(client=owner, api_version=version), 200, m.UserOut, "own profile")
    assert me.status == "ACTIVE" and me.role == "SUPER_ADMIN" and str(me.tenant_id) == str(organisation.id), me
    step("owner signed in through the NEW_PASSWORD_REQUIRED challenge")

    key = str(uuid.uuid4())
    customer_in = m.CustomerIn(customer_ref="py-client-0001", display_name="Generated Client Ltd")
    created = customers_create.sync_detailed(client=owner, body=customer_in, api_version=version, idempotency_key=key)
    customer = parsed(created, 201, m.CustomerOut, "register customer")
    assert customer.customer_ref == "py-client-0001" and customer.status == m.CustomerStatus.ACTIVE, customer
    assert created.headers.get("location") == "/api/customers/py-client-0001", created.headers
    replayed = customers_create.sync_detailed(client=owner, body=customer_in, api_version=version, idempotency_key=key)
    assert parsed(replayed, 201, m.CustomerOut, "replay").customer_ref == customer.customer_ref
    assert replayed.headers.get("idempotent-replayed") == "true", replayed.headers
    read = parsed(
        customers_get.sync_detailed(customer_ref="py-client-0001", client=owner, api_version=version),
        200,
        m.CustomerOut,
        "read customer",
    )
    assert read.display_name == "Generated Client Ltd", read
    missing = parsed(
        customers_get.sync_detailed(customer_ref="py-client-none", client=owner, api_version=version),
        404,
        m.ErrorBody,
        "missing customer",
    )
    assert missing.status == 404 and missing.request_id, missing
    changed = parsed(
        customers_update.sync_detailed(
            customer_ref="py-client-0001",
            client=owner,
            body=m.CustomerPatch(status=m.CustomerStatus.INACTIVE),
            api_version=version,
            idempotency_key=str(uuid.uuid4()),
        ),
        200,
        m.CustomerOut,
        "change customer status",
    )
    assert changed.status == m.CustomerStatus.INACTIVE, changed
    step("customer registered, replayed, read, made INACTIVE; a missing one is 404 in the envelope")

    page_a = parsed(customers_list.sync_detailed(client=owner, api_version=version), 200, m.CustomerPageA, "style A")
    assert page_a.total_elements == 1 and page_a.content[0].customer_ref == "py-client-0001", page_a
    page_b = parsed(
        audit_events_list.sync_detailed(client=owner, api_version=version), 200, m.AuditEventPageB, "style B"
    )
    assert page_b.total_items >= 1, page_b
    tenant = organisation.id
    page_c = parsed(
        roles_list.sync_detailed(tenant_id=tenant, client=owner, api_version=version), 200, m.RolePageC, "style C"
    )
    super_admin = next(r for r in page_c.items if r.name == "SUPER_ADMIN")
    detail = parsed(
        roles_get.sync_detailed(tenant_id=tenant, role_id=super_admin.id, client=owner, api_version=version),
        200,
        m.RoleDetail,
        "role with holders",
    )
    assert detail.name == "SUPER_ADMIN" and [h.email for h in detail.holders.items] == [OWNER_EMAIL], detail
    events, cursor = [], UNSET
    for _ in range(50):
        page_d = parsed(
            webhook_events_list.sync_detailed(client=owner, api_version=version, limit=1, cursor=cursor),
            200,
            m.WebhookEventPageD,
            "style D",
        )
        assert len(page_d.items) <= 1 and page_d.limit == 1, page_d
        events += page_d.items
        if page_d.next_cursor is None:
            break
        cursor = page_d.next_cursor
    assert "customer.status_changed" in [e.type_ for e in events], events
    offset = parsed(transactions_list.sync_detailed(client=owner, api_version=version), 200, m.OperationPageA, "A or D")
    keyset = parsed(
        transactions_list.sync_detailed(client=owner, api_version=version, limit=5), 200, m.OperationPageD, "A or D"
    )
    assert offset.total_elements == 0 and keyset.items == [] and keyset.next_cursor is None, (offset, keyset)
    step("one list of each paging style parsed (A, B, C with role holders, D, and A-or-D)")
    return owner


class Conformance:
    """Validates real responses against the response schema the document declares for their
    operation and status, `$ref`s resolved within the document itself."""

    def __init__(self, document, document_uri):
        from openapi_schema_validator import OAS31Validator, oas31_format_checker
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT202012

        self.validator_class, self.format_checker = OAS31Validator, oas31_format_checker
        self.document_uri = document_uri
        # An http-like URI: the document's `#/components/...` references resolve against it.
        self.registry = Registry().with_resource(
            document_uri, Resource.from_contents(document, default_specification=DRAFT202012)
        )
        self.operations = {
            operation["operationId"]: (path, method, operation)
            for path, item in document["paths"].items()
            for method, operation in item.items()
            if isinstance(operation, dict) and "operationId" in operation
        }

    def errors(self, operation_id, status, body):
        """The schema errors of `body` as the `status` answer of `operation_id`."""
        path, method, operation = self.operations[operation_id]
        response = operation["responses"].get(str(status))
        if response is None:
            return [f"status {status} is not documented"]
        if "application/json" not in response.get("content", {}):
            return [f"the {status} answer documents no application/json content"]
        where = ("paths", path, method, "responses", str(status), "content", "application/json", "schema")
        pointer = "/".join(part.replace("~", "~0").replace("/", "~1") for part in where)
        validator = self.validator_class(
            {"$ref": f"{self.document_uri}#/{pointer}"}, registry=self.registry, format_checker=self.format_checker
        )
        found = sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path))
        return [
            f"{e.message} at {e.json_path} (schema {'/'.join(str(s) for s in e.absolute_schema_path)})" for e in found
        ]

    def check(self, operation_id, reply, status):
        """The body of `reply`, which must have `status` and match the document's schema for it."""
        assert reply.status_code == status, f"{operation_id}: {reply.status_code} {reply.content!r}"
        errors = self.errors(operation_id, status, reply.json())
        if errors:
            listed = "\n  ".join(errors)
            sys.exit(f"{operation_id} {status}: the response does not match the document's schema:\n  {listed}")
        return reply.json()


# A parameter of each type, three with a default: ParameterOut.default is a string, a number or a
# boolean, and absent when the parameter is required.
SCRIPT_SOURCE = """// @param amount: decimal = "1.00" -- what to move
// @param count: integer = 3
// @param enabled: boolean = true
// @param account: string -- no default: required
let note = account + " " + amount + " x" + count;
if enabled { log(note); }
note
"""


def responses_conform(document, base_url, owner, version):
    conformance = Conformance(document, f"{base_url}/openapi.json")
    # A validator that resolved nothing would pass anything.
    assert conformance.errors("customers.get", 200, {}), "an empty object passed as a customer"
    http = owner.get_httpx_client()
    headers = {"API-Version": version}

    def call(method, path, body=None, write=False):
        sent = dict(headers, **({"Idempotency-Key": str(uuid.uuid4())} if write else {}))
        return http.request(method, path, headers=sent, json=body)

    created = conformance.check(
        "scripts.create",
        call("POST", "/api/scripts", {"name": "conformance", "source": SCRIPT_SOURCE}, write=True),
        201,
    )
    script = conformance.check("scripts.get", call("GET", f"/api/scripts/{created['scriptId']}"), 200)
    defaults = {p["name"]: p.get("default", "absent") for p in script["parameters"]}
    # A decimal comes back in canonical form ("1"), still a string.
    amount = defaults.pop("amount")
    assert isinstance(amount, str) and Decimal(amount) == Decimal("1.00"), script["parameters"]
    assert defaults == {"count": 3, "enabled": True, "account": "absent"}, script["parameters"]
    assert type(defaults["count"]) is int and type(defaults["enabled"]) is bool, script["parameters"]
    conformance.check("scripts.list", call("GET", "/api/scripts"), 200)
    conformance.check("customers.get", call("GET", "/api/customers/py-client-0001"), 200)
    conformance.check("customers.get", call("GET", "/api/customers/py-client-none"), 404)
    conformance.check("customers.list", call("GET", "/api/customers"), 200)
    conformance.check("users.me", call("GET", "/api/users/me"), 200)
    conformance.check("audit.events.list", call("GET", "/api/audit/events"), 200)
    # An operation and an event, so the lists below have items to check: a contract, an account
    # once provisioned, a MINT followed to its end, and a customer's status change.
    conformance.check("contracts.create", call("POST", "/api/contracts", {"assetId": "EUR"}, write=True), 201)
    customer = {"customerRef": "py-client-ops", "displayName": "Operations"}
    conformance.check("customers.create", call("POST", "/api/customers", customer, write=True), 201)
    account = {"accountRef": "py-client-acc", "customerRef": "py-client-ops", "assetId": "EUR"}
    conformance.check("accounts.create", call("POST", "/api/accounts", account, write=True), 201)
    wait_for(lambda: call("GET", "/api/accounts/py-client-acc").json().get("status") == "ACTIVE", "the account ACTIVE")
    conformance.check("accounts.get", call("GET", "/api/accounts/py-client-acc"), 200)
    mint = {"txType": "MINT", "assetId": "EUR", "accountRef": "py-client-acc", "amount": "12.50"}
    submitted = conformance.check("transactions.submit", call("POST", "/api/transactions", mint, write=True), 202)
    operation = f"/api/transactions/{submitted['transactionId']}"
    wait_for(lambda: call("GET", operation).json().get("state") == "CONFIRMED", "the MINT CONFIRMED")
    conformance.check("transactions.get", call("GET", operation), 200)
    conformance.check("accounts.balances", call("GET", "/api/accounts/py-client-acc/balances"), 200)
    conformance.check(
        "customers.update", call("PATCH", "/api/customers/py-client-ops", {"status": "INACTIVE"}, write=True), 200
    )
    wait_for(lambda: call("GET", "/api/webhook-events").json().get("items"), "an event in the history")
    events = conformance.check("webhookEvents.list", call("GET", "/api/webhook-events"), 200)
    assert events["items"], events
    conformance.check("webhookEvents.get", call("GET", f"/api/webhook-events/{events['items'][0]['id']}"), 200)
    listed = conformance.check("transactions.list", call("GET", "/api/transactions"), 200)
    assert listed["content"], listed
    conformance.check("transactions.list", call("GET", "/api/transactions?limit=5"), 200)
    step("real responses match the document's schemas (parameter defaults, customers, accounts, operations, events)")


def wait_for(condition, what, timeout=30.0):
    """Polls `condition` until it holds; fails naming `what` when the deadline passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def main():
    if not __debug__:
        sys.exit("run without -O: the checks are assertions")
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--base-url", required=True)
    arguments.add_argument("--data-dir", required=True, type=Path)
    arguments.add_argument("--work-dir", required=True, type=Path)
    options = arguments.parse_args()
    options.work_dir.mkdir(parents=True, exist_ok=True)

    document, document_path = fetch_document(options.base_url, options.work_dir)
    validate(document)
    package = generate(document_path, options.work_dir)
    version = document["info"]["version"]
    owner = session(package, options.base_url, options.data_dir, version)
    responses_conform(document, options.base_url, owner, version)
    step("all checks passed")


if __name__ == "__main__":
    main()
