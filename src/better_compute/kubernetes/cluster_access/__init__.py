"""Reaching a substrate's cluster, one package: every credential and identity the substrate uses there.

    kube_api            a lightkube client on a credential (memory only, redacted, timed out, counted);
                        the run's admin client minted through the driver; Kubernetes errors as ComputeErrors
    join_reviewer       the join check's TokenReview-only identity and its 600 s token, cached in memory
    substrate_identity  bc-substrate on an adopted cluster: made, its 600 s token, and revoked
    cluster_claim       the in-cluster claim (kube-system/better-compute-substrate): one cluster, one pool
    adopted_cluster     reaching an adopted cluster as bc-substrate, and leaving it (revoke, then unclaim)

The substrate's steps, its teardown, the clusters reconciler and the sweep import this package;
it imports none of them (`.importlinter`: cluster-access-below), only the driver seam
(`kubernetes.provider`), `kubernetes.names` and `kubernetes.calls`. What the kubernetes side makes
in a cluster it also takes back from here: a provider driver only mints the admin credential.
"""
