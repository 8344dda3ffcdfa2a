"""apiary's kube-controller-manager: controllers for the objects apiary serves, as a client of the API
(HTTPS through the proxy, its own client certificate: user system:kube-controller-manager), leader-elected
on a Lease so that several replicas can run and one acts."""
