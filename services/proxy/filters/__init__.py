"""The proxy's own filters and the backends it gives the library's (services.apiserver.filters):
the auth service's authenticator and authorizer, the apf service's seats, the audit policy."""
