"""What the application holds for its requests, each read through one typed accessor.

``create_app`` stores the API's configuration and its request metrics on the application
(``app.extensions``) under the keys below; routes and pages read them with
:func:`api_config` and :func:`api_metrics`, never by spelling a key.
"""

from __future__ import annotations

from flask import Flask, current_app

from tickwork.services.api.config import ApiConfig
from tickwork.services.api.metrics import ApiMetrics

CONFIG_KEY = "tickwork.config"
METRICS_KEY = "tickwork.metrics"


def install(app: Flask, config: ApiConfig, metrics: ApiMetrics) -> None:
    """Keep ``config`` and ``metrics`` on ``app`` for the accessors below."""
    app.extensions[CONFIG_KEY] = config
    app.extensions[METRICS_KEY] = metrics


def api_config() -> ApiConfig:
    """The configuration of the app serving this request."""
    config: ApiConfig = current_app.extensions[CONFIG_KEY]
    return config


def api_metrics() -> ApiMetrics:
    """The request metrics of the app serving this request."""
    metrics: ApiMetrics = current_app.extensions[METRICS_KEY]
    return metrics
