"""The middleware's former import path, kept so that settings naming
``proxypool_client.scrapy.ProxyPoolMiddleware`` go on working. Use
``proxypool_client.scrapy_middleware``."""

import warnings

from .scrapy_middleware import SETTINGS, ConfigError, ProxyPoolMiddleware

warnings.warn(
    "proxypool_client.scrapy is now proxypool_client.scrapy_middleware: "
    'DOWNLOADER_MIDDLEWARES = {"proxypool_client.scrapy_middleware.ProxyPoolMiddleware": 740}',
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["SETTINGS", "ConfigError", "ProxyPoolMiddleware"]
