"""Calling webhooks (what k8s.io/apiserver/pkg/util/webhook is to kube): where a clientConfig points (url, or a
Service resolved to an endpoint), TLS verified with its caBundle, timeouts, and the clientConfig's validation.
Admission webhooks (services/admission/webhook/) and CRD conversion webhooks (converter.py) call through it."""
