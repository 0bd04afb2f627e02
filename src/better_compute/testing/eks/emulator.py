"""`EksEmulator`: EKS, STS, EC2 and EC2 Auto Scaling on one loopback port, for boto3 with `endpoint_url`.

    async with EksEmulator(clock, kube) as eks:
        client = boto3.client("eks", endpoint_url=eks.url, region_name="us-east-1",
                              aws_access_key_id=eks.access_key_id, aws_secret_access_key=eks.secret_access_key)

Every request must carry a SigV4 signature that botocore's signer reproduces with
the secret of the access key it names; the service it was signed for (from the
credential scope) picks the protocol: `eks` rest-json, `ec2`, `sts` and `autoscaling` query/XML.
Each ACTIVE cluster is a `KubeCluster` of the shared Kubernetes API emulator, and
its API server accepts an EKS token (`k8s-aws-v1.` + a presigned STS
GetCallerIdentity URL signed with `x-k8s-aws-id: <cluster name>`) for 15 minutes
from its signing time, when the signer has an access entry on the cluster. The URL
may name any real STS host (`https://sts.<region>.amazonaws.com`, what a stock
client signs for, or the global `https://sts.amazonaws.com`, scoped to us-east-1),
as the EKS authenticator allows, or this emulator's own URL.
Because the token is minted on the client, the emulator first sees it when it
checks it: `.issued` lists every token it has accepted.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from better_compute.core.clock import Clock
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing.eks.autoscaling import autoscaling_error, autoscaling_response
from better_compute.testing.eks.catalog import (
    ADMIN_POLICY_ARN,
    DEFAULT_SUBNETS,
    DEFAULT_VERSION,
    TEST_ACCESS_KEY_ID,
    TEST_ACCOUNT_ID,
    TEST_PRINCIPAL_ARN,
    TEST_SECRET_ACCESS_KEY,
    Timings,
)
from better_compute.testing.eks.eks_api import Caller, EksApi, role_of
from better_compute.testing.eks.errors import AwsError
from better_compute.testing.eks.faults import EksFaults
from better_compute.testing.eks.model import Cluster
from better_compute.testing.eks.query_api import ec2_error, ec2_response, sts_error, sts_identity
from better_compute.testing.eks.service_quotas import ServiceQuotas
from better_compute.testing.eks.sigv4 import SignatureError, SignedBy, verify_header_signature, verify_presigned
from better_compute.testing.eks.world import World
from better_compute.testing.kube import Attributes, KubeApiServer, TokenReview
from better_compute.testing.lifecycle import StartStop
from better_compute.testing.loopback import LoopbackServer

__all__ = ["EksEmulator", "Identity"]

TOKEN_PREFIX = "k8s-aws-v1."
TOKEN_LIFETIME = timedelta(minutes=15)
"""STS (through the EKS authenticator) honours a presigned token this long after it was signed."""
CLOCK_SKEW = timedelta(minutes=5)
_STS_HOST = re.compile(r"^sts(?:\.(?P<region>[a-z]{2}(?:-[a-z]+)+-\d))?\.amazonaws\.com$")
"""The STS hosts the EKS authenticator lets a token name: regional, or the global one (us-east-1)."""
_THROTTLE = {"eks": ("ThrottlingException", 429), "ec2": ("RequestLimitExceeded", 503), "sts": ("Throttling", 400)}


@dataclass(frozen=True)
class Identity:
    """An IAM principal the emulator knows the secret of."""

    access_key_id: str
    secret_access_key: str
    principal_arn: str

    @property
    def account_id(self) -> str:
        return self.principal_arn.split(":")[4]


class EksEmulator(StartStop):
    """The simulated AWS account: EKS clusters backed by `KubeCluster`s, STS and EC2."""

    def __init__(self, clock: Clock, kube: KubeApiServer, *, timings: Timings | None = None) -> None:
        self.clock = clock
        self.kube = kube
        self.faults = EksFaults()
        self.world = World(clock, kube, timings or Timings(), self.faults, self._authenticate, self._authorize)
        self.world.subnets.update(DEFAULT_SUBNETS)
        self.faults._reclaim = self.world.reclaim_spot
        self.faults._silence = self.world.silence
        self.api = EksApi(self.world)
        self.quotas = ServiceQuotas()
        """EC2's vCPU quotas and instances outside the node groups (testing/eks/service_quotas.py)."""
        self.issued: list[str] = []
        self._identities: dict[str, Identity] = {}
        self.identity = self.add_identity(TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY, TEST_PRINCIPAL_ARN)
        self._server = LoopbackServer(self, name="eks-emulator")
        self.url = self._server.url

    # -- identities and the world ----------------------------------------------------------

    @property
    def access_key_id(self) -> str:
        return self.identity.access_key_id

    @property
    def secret_access_key(self) -> str:
        return self.identity.secret_access_key

    @property
    def principal_arn(self) -> str:
        return self.identity.principal_arn

    def add_identity(self, access_key_id: str, secret_access_key: str, principal_arn: str) -> Identity:
        identity = Identity(access_key_id, secret_access_key, principal_arn)
        self._identities[access_key_id] = identity
        return identity

    def add_subnet(self, subnet_id: str, zone: str) -> None:
        self.world.subnets[subnet_id] = zone

    def cluster(self, name: str, region: str = "us-east-1") -> Cluster | None:
        return self.world.cluster(region, name)

    async def settle(self) -> None:
        """Apply every provider step that is due on the clock (tests call it after `advance`)."""
        await self.world.settle()

    async def autoscale(self, cluster: str, nodegroup: str, desired: int, region: str = "us-east-1") -> int:
        """Play the Cluster Autoscaler: the node group's `desiredSize` moves to `desired` within its bounds."""
        return await self.world.autoscale(region, cluster, nodegroup, desired)

    async def seed_cluster(
        self,
        name: str,
        *,
        region: str = "us-east-1",
        version: str = DEFAULT_VERSION,
        admin_access: bool = True,
        principal_arn: str | None = None,
        authentication_mode: str = "API_AND_CONFIG_MAP",
        nodegroups: Mapping[str, tuple[str, int]] | None = None,
    ) -> str:
        """An ACTIVE cluster someone else made, with node groups of its own; answers its
        adopt id `<region>/<name>`. With `admin_access`, the principal (the emulator's
        test identity by default) has an access entry with AmazonEKSClusterAdminPolicy."""
        owner = Caller(f"arn:aws:iam::{TEST_ACCOUNT_ID}:role/platform-team", TEST_ACCOUNT_ID, region)
        subnets = sorted(s for s, z in self.world.subnets.items() if z.startswith(region))
        cluster = self.api.new_cluster(
            name=name,
            who=owner,
            version=version,
            role_arn=f"arn:aws:iam::{TEST_ACCOUNT_ID}:role/eks-cluster",
            subnets=subnets,
            private=False,
            public=True,
            mode=authentication_mode,
            bootstrap=True,
            token=None,
        )
        if admin_access:
            if authentication_mode == "CONFIG_MAP":
                raise ValueError("a CONFIG_MAP cluster has no access entries")
            self.api.grant(cluster, role_of(principal_arn or self.principal_arn), ADMIN_POLICY_ARN)
        self.world.add_cluster(cluster, ready_in=0)
        await self.world.settle()
        for group, (instance_type, size) in (nodegroups or {"own-workers": ("m7i.large", 1)}).items():
            body = {
                "nodegroupName": group,
                "nodeRole": f"arn:aws:iam::{TEST_ACCOUNT_ID}:role/eks-node",
                "subnets": subnets,
                "instanceTypes": [instance_type],
                "scalingConfig": {"minSize": 0, "maxSize": max(size, 1), "desiredSize": size},
            }
            self.api.create_nodegroup(cluster, body, ready_in=0)
        await self.world.settle()
        return f"{region}/{name}"

    # -- tokens ----------------------------------------------------------------------------

    def _fresh(self, signed_at: datetime) -> bool:
        now = self.clock.now()
        return signed_at - CLOCK_SKEW <= now <= signed_at + TOKEN_LIFETIME

    def _authenticate(self, cluster: Cluster, token: str) -> TokenReview | None:
        """The cluster API server's token check, as aws-iam-authenticator does it: decode
        the presigned URL, check its signature with `x-k8s-aws-id` set to this cluster's
        name, its age, and the signer's access entry."""
        if not token.startswith(TOKEN_PREFIX):
            return None
        raw = token[len(TOKEN_PREFIX) :]
        try:
            url = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        parts = urlsplit(url)
        action = dict(parse_qsl(parts.query, keep_blank_values=True))
        host_region = self._sts_host_region(parts.scheme, parts.netloc)
        if host_region is None or parts.path not in ("", "/"):
            return None
        if action.get("Action") != "GetCallerIdentity" or action.get("Version") != "2011-06-15":
            return None
        try:
            signed, _ = verify_presigned(self._secrets(), url=url, extra_headers={"x-k8s-aws-id": cluster.name})
        except SignatureError:
            return None
        if signed.service != "sts" or not self._fresh(signed.timestamp):
            return None
        if host_region and signed.region != host_region:
            return None  # STS answers SignatureDoesNotMatch: the scope must name the host's region
        identity = self._identities[signed.access_key_id]
        groups = self._groups(cluster, role_of(identity.principal_arn))
        if groups is None:
            return None
        if token not in self.issued:
            self.issued.append(token)
        return TokenReview(identity.principal_arn, (*groups, "system:authenticated"), signed.timestamp + TOKEN_LIFETIME)

    def _sts_host_region(self, scheme: str, host: str) -> str | None:
        """The region a real STS host signs for ("" for this emulator's own URL); None for a host STS is not."""
        if f"{scheme}://{host}" == self.url:
            return ""
        match = _STS_HOST.match(host) if scheme == "https" else None
        if match is None:
            return None
        return match["region"] or "us-east-1"

    def _groups(self, cluster: Cluster, principal: str) -> tuple[str, ...] | None:
        entry = cluster.access_entries.get(principal)
        if entry is not None:
            return tuple(entry.kubernetes_groups)
        if cluster.authentication_mode != "API" and cluster.bootstrap_admin and principal == cluster.creator_arn:
            return ("system:masters",)
        return None

    @staticmethod
    def _authorize(cluster: Cluster, user: TokenReview, attributes: Attributes) -> str | None:
        """EKS's access-policy authorizer (after RBAC): an access entry holding
        AmazonEKSClusterAdminPolicy may do anything in the cluster."""
        entry = cluster.access_entries.get(role_of(user.subject))
        if entry is not None and ADMIN_POLICY_ARN in entry.policies:
            return f"EKS access policy {ADMIN_POLICY_ARN.rsplit('/', 1)[-1]} for {entry.principal_arn}"
        return None

    def accepts(self, credentials: ClusterCredentials) -> bool:
        """Whether the cluster at `credentials.endpoint` accepts its token."""
        for cluster in self.world.clusters.values():
            if cluster.kube is not None and cluster.kube.endpoint == credentials.endpoint:
                return credentials.ca_data == cluster.kube.ca_data and (
                    self._authenticate(cluster, credentials.token) is not None
                )
        return False

    def _secrets(self) -> dict[str, str]:
        return {k: i.secret_access_key for k, i in self._identities.items()}

    # -- HTTP ------------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        try:
            body = await request.body()
        except ClientDisconnect:
            return
        response = await self._dispatch(request, scope, body)
        await response(scope, receive, send)

    async def _dispatch(self, request: Request, scope: dict[str, Any], body: bytes) -> Response:
        raw_path = scope.get("raw_path", request.url.path.encode()).decode()
        raw_path = raw_path.split("?", 1)[0]
        query = scope.get("query_string", b"").decode()
        headers = {k.lower(): v for k, v in request.headers.items()}
        if request.method == "GET" and "X-Amz-Signature=" in query:
            return self._presigned_identity(request, headers, raw_path, query)
        guess = "eks" if raw_path.startswith("/clusters") else ("sts" if b"GetCallerIdentity" in body else "ec2")
        try:
            signed = verify_header_signature(
                self._secrets(),
                method=request.method,
                scheme=request.url.scheme,
                raw_path=raw_path,
                query=query,
                headers=headers,
                body=body,
            )
        except SignatureError as exc:
            return self._error(guess, AwsError(exc.code, exc.message, 403))
        try:
            self._throttle(signed.service)
            if signed.service == "eks":
                return await self._eks(request.method, raw_path, query, body, signed)
            if signed.service == "servicequotas":
                return self._service_quotas(headers, body, signed)
            form = dict(parse_qsl(body.decode(), keep_blank_values=True))
            action = form.get("Action", "")
            if signed.service == "ec2" and action == "DescribeInstances":
                await self.world.settle()
                return _xml(self.quotas.describe_instances(form, signed.region, self.world.clusters.values()))
            if signed.service == "ec2":
                await self.world.settle()
                return _xml(ec2_response(action, form, signed.region, self.world.subnets, self.world.launch_templates))
            if signed.service == "autoscaling":
                await self.world.settle()
                return _xml(autoscaling_response(self.world, action, form, signed.region))
            if signed.service == "sts" and action == "GetCallerIdentity":
                return _xml(self._identity_xml(signed.access_key_id))
            raise AwsError("InvalidAction", f"{signed.service} has no action {action!r} here")
        except AwsError as exc:
            return self._error(signed.service, exc)

    def _throttle(self, service: str) -> None:
        if self.faults.throttled_requests > 0:
            self.faults.throttled_requests -= 1
            code, status = _THROTTLE.get(service, ("Throttling", 400))
            raise AwsError(code, "Rate exceeded", status, retry_after=self.faults.throttle_retry_after)

    async def _eks(self, method: str, raw_path: str, query: str, body: bytes, signed: SignedBy) -> Response:
        parts = [unquote(p) for p in raw_path.strip("/").split("/")]
        try:
            payload = json.loads(body) if body else {}
        except ValueError as exc:
            raise AwsError("InvalidRequestException", f"malformed JSON body: {exc}") from exc
        identity = self._identities[signed.access_key_id]
        who = Caller(identity.principal_arn, identity.account_id, signed.region)
        answer = await self.api.handle(method, parts, dict(parse_qsl(query)), payload, who)
        return Response(
            json.dumps(answer),
            200,
            headers={"x-amzn-RequestId": str(uuid.uuid4())},
            media_type="application/json",
        )

    def _service_quotas(self, headers: Mapping[str, str], body: bytes, signed: SignedBy) -> Response:
        """Service Quotas' JSON 1.1 protocol: the operation is named by X-Amz-Target."""
        target = headers.get("x-amz-target", "")
        if target != "ServiceQuotasV20190624.GetServiceQuota":
            raise AwsError("UnknownOperationException", f"Unknown operation {target}")
        try:
            payload = json.loads(body) if body else {}
        except ValueError as exc:
            raise AwsError("SerializationException", f"malformed JSON body: {exc}") from exc
        identity = self._identities[signed.access_key_id]
        answer = self.quotas.get_service_quota(payload, signed.region, identity.account_id, identity.principal_arn)
        return Response(
            json.dumps(answer),
            200,
            headers={"x-amzn-RequestId": str(uuid.uuid4())},
            media_type="application/x-amz-json-1.1",
        )

    def _identity_xml(self, access_key_id: str) -> str:
        identity = self._identities[access_key_id]
        return sts_identity(identity.principal_arn, identity.account_id, access_key_id)

    def _presigned_identity(self, request: Request, headers: Mapping[str, str], raw_path: str, query: str) -> Response:
        """A presigned STS GetCallerIdentity URL, fetched as the EKS authenticator does."""
        url = f"{request.url.scheme}://{headers.get('host', '')}{raw_path}?{query}"
        signed_names = dict(parse_qsl(query)).get("X-Amz-SignedHeaders", "host").split(";")
        extra = {h: headers.get(h, "") for h in signed_names if h != "host"}
        try:
            signed, _ = verify_presigned(self._secrets(), url=url, extra_headers=extra)
        except SignatureError as exc:
            return self._error("sts", AwsError(exc.code, exc.message, 403))
        if not self._fresh(signed.timestamp):
            return self._error(
                "sts", AwsError("ExpiredToken", "The security token included in the request is expired", 403)
            )
        return _xml(self._identity_xml(signed.access_key_id))

    def _error(self, service: str, error: AwsError) -> Response:
        headers = {"x-amzn-RequestId": str(uuid.uuid4())}
        if error.retry_after is not None:
            headers["Retry-After"] = f"{error.retry_after:g}"
        if service == "eks":
            headers["x-amzn-ErrorType"] = error.code
            body = json.dumps({"message": error.message, **error.fields})
            return Response(body, error.status, headers=headers, media_type="application/json")
        if service == "servicequotas":
            body = json.dumps({"__type": error.code, "Message": error.message})
            return Response(body, error.status, headers=headers, media_type="application/x-amz-json-1.1")
        if service == "autoscaling":
            return Response(autoscaling_error(error), error.status, headers=headers, media_type="text/xml")
        text = ec2_error(error) if service == "ec2" else sts_error(error)
        return Response(text, error.status, headers=headers, media_type="text/xml")

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        await self._server.start()
        self.world.start()

    async def stop(self) -> None:
        await self.world.stop()
        await self._server.stop()


def _xml(text: str) -> Response:
    return Response(text, 200, media_type="text/xml")
