"""Command-line flags of a kit server, with kube's names (RecommendedOptions: SecureServing, Etcd,
DelegatingAuthentication, DelegatingAuthorization, Audit)."""
from __future__ import annotations

import argparse

from services.apiserver.audit import options as audit_options
from services.common import config
from services.common.duration import flag


def _list(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def parser(prog: str, description: str, etcd_prefix: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    s = p.add_argument_group("secure serving")
    s.add_argument("--secure-port", type=int, default=8443, help="the HTTPS port")
    s.add_argument("--bind-address", default="0.0.0.0", help="the address the HTTPS port listens on")
    s.add_argument("--tls-cert-file", required=True, help="the serving certificate (PEM)")
    s.add_argument("--tls-private-key-file", required=True, help="the serving certificate's key (PEM)")
    s.add_argument("--min-request-timeout", type=int, default=1800,
                   help="a watch without timeoutSeconds ends after a random time between this and twice this")
    s.add_argument("--request-timeout", type=flag, default=60.0,
                   help="the deadline of a request that is not long-running (a shorter ?timeout= narrows it); 504 "
                        "past it")
    e = p.add_argument_group("etcd")
    e.add_argument("--etcd-servers", default="http://127.0.0.1:2379", help="comma-separated etcd client URLs")
    e.add_argument("--etcd-prefix", default=etcd_prefix,
                   help="the key prefix of every object (one path segment without dots, e.g. /pizza-apiserver)")
    e.add_argument("--etcd-request-timeout", type=flag, default=10.0, help="deadline of each etcd request")
    e.add_argument("--etcd-compaction-interval", type=flag, default=0.0,
                   help="how often this server compacts etcd (0: never; leave it to the etcd's owner when shared)")
    e.add_argument("--watch-bookmark-interval", type=flag, default=60.0, help="how often a watch gets a bookmark")
    a = p.add_argument_group("delegated authentication and authorization")
    a.add_argument("--kubeconfig", default="",
                   help="how to reach the core API server (default: the pod's ServiceAccount in a cluster)")
    a.add_argument("--authentication-kubeconfig", default="",
                   help="kubeconfig for TokenReviews and the extension-apiserver-authentication ConfigMap "
                   "(default: --kubeconfig)")
    a.add_argument("--authorization-kubeconfig", default="",
                   help="kubeconfig for SubjectAccessReviews (default: --kubeconfig)")
    a.add_argument("--client-ca-file", default="",
                   help="CA of x509 client certificates (default: client-ca-file of the ConfigMap "
                   "kube-system/extension-apiserver-authentication)")
    a.add_argument("--requestheader-client-ca-file", default="",
                   help="CA of the front proxy's client certificate, the only one allowed to assert X-Remote-* "
                   "headers (default: from the ConfigMap kube-system/extension-apiserver-authentication)")
    a.add_argument("--requestheader-allowed-names", type=_list, default=None,
                   help="common names of front-proxy certificates allowed to assert identities (empty: any)")
    a.add_argument("--requestheader-username-headers", type=_list, default=None)
    a.add_argument("--requestheader-uid-headers", type=_list, default=None)
    a.add_argument("--requestheader-group-headers", type=_list, default=None)
    a.add_argument("--requestheader-extra-headers-prefix", type=_list, default=None)
    a.add_argument("--extension-authentication-resync", type=flag, default=30.0,
                   help="how often kube-system/extension-apiserver-authentication is read again (when the CAs "
                   "come from it)")
    a.add_argument("--authentication-token-webhook-cache-ttl", type=flag, default=10.0,
                   help="how long TokenReview answers are cached")
    a.add_argument("--authorization-webhook-cache-authorized-ttl", type=flag, default=10.0,
                   help="how long an allowed SubjectAccessReview answer is cached")
    a.add_argument("--authorization-webhook-cache-unauthorized-ttl", type=flag, default=10.0,
                   help="how long a denied SubjectAccessReview answer is cached")
    a.add_argument("--authorization-always-allow-paths", type=_list, default=["/healthz", "/readyz", "/livez"],
                   help="paths served without authentication or authorization (a trailing * matches a prefix)")
    p.add_argument("--disable-admission-plugins", type=_list, default=[],
                   help="built-in admission plug-ins to turn off (NamespaceLifecycle)")
    audit_options.add_flags(p)
    p.add_argument("-v", type=int, default=0, help="log verbosity")
    config.add_tracing_flag(p)
    return p


def parse_args(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The flags, checked as kube checks them (the audit backends' settings)."""
    args = p.parse_args(argv)
    for err in audit_options.validate(args):
        p.error(err)
    return args
