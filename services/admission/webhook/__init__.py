"""Admission webhooks (k8s.io/apiserver/pkg/admission/plugin/webhook): MutatingAdmissionWebhook and
ValidatingAdmissionWebhook, from the Mutating/ValidatingWebhookConfigurations the registry serves."""
