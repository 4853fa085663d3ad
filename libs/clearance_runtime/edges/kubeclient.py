"""A Kubernetes API client, configured the one way every Clearance process is: from the
kubeconfig file ``CLEARANCE_KUBECONFIG`` names, or else from the pod's service account.

``kubernetes_asyncio`` does the configuration and authentication (token refresh
included), TLS and one aiohttp session; callers send plain API paths through
``call_api`` and read the JSON the server sent, without the client's models.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_asyncio.client
import kubernetes_asyncio.config


async def api_client(kubeconfig: Path | None, *,
                     pool_size: int = 0) -> kubernetes_asyncio.client.ApiClient:
    """An API client from ``kubeconfig``, or from the pod's service account when None
    (``ConfigException`` outside a pod). ``pool_size``: connections at least."""
    cfg = kubernetes_asyncio.client.Configuration()
    if kubeconfig is None:
        kubernetes_asyncio.config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=cfg)
    else:
        await kubernetes_asyncio.config.load_kube_config(config_file=str(kubeconfig),
                                                         client_configuration=cfg)
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize, pool_size)
    return kubernetes_asyncio.client.ApiClient(cfg)
