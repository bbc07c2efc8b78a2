"""The Python client: a platform's runs as DataFrames (docs/data-out.md).

Installs with the trainer side (stdlib `urllib` only); pandas and pyarrow
make its answers DataFrames and its downloads Parquet when present
(`pip install 'training-platform[client]'`). Reading a database directly
(`Client(database_url=...)`) needs the `server` install.
"""

from training_platform.client.client import Client, Run
from training_platform.client.errors import (
    AuthenticationError,
    ClientError,
    InvalidParameterError,
    MissingExtraError,
    RunNotFoundError,
    ServerUnavailableError,
)

__all__ = [
    "AuthenticationError",
    "Client",
    "ClientError",
    "InvalidParameterError",
    "MissingExtraError",
    "Run",
    "RunNotFoundError",
    "ServerUnavailableError",
]
