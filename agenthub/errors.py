"""AgentHub's exception tree; adapters translate SDK errors into it at the edge.

AgentHubError
├── ConfigError          bad configuration; start-up stops with one line naming the key
│   └── PortUnavailableError  the HTTP port is taken or not ours to bind
├── AddressNotReadyError the HTTP address is not there yet (boot): a failure a restart may get past
├── InvalidIdError       an id fails the session key factory (→ HTTP 400)
├── StorageError         a path escapes its directory or a file cannot be written
│   └── PathRefusedError   not a plain name, or a symbolic link inside data/ (→ HTTP 403)
├── AgentNotFoundError   no such agent (→ HTTP 404)
├── SessionBusyError     the session is running a turn (→ HTTP 409)
├── LLMError             the model call failed after retries
│   ├── ContextOverflowError   the prompt exceeded the model's window
│   └── ModelNotFoundError     the endpoint does not know the requested model (404)
└── ChannelError
    └── ChannelSendError  a platform refused or failed a send
"""

from __future__ import annotations

from agenthub.i18n import Text


class AgentHubError(Exception):
    """Base of every error AgentHub raises on purpose."""


class ConfigError(AgentHubError):
    """Configuration is invalid; the message names the key, never a secret value."""


PORT_HINT = (
    "stop what uses it, or choose another port: http.port in agenthub.toml, AGENTHUB_HTTP__PORT=<port> or --port <port>"
)
HOST_HINT = (
    "choose an address of this machine (127.0.0.1, or 0.0.0.0 for all): http.host in agenthub.toml, "
    "AGENTHUB_HTTP__HOST=<address> or --host <address>"
)


class PortUnavailableError(ConfigError):
    """The HTTP server cannot listen on its address; the message names it and the keys that change it."""

    def __init__(self, host: str, port: int, reason: str, hint: str = PORT_HINT) -> None:
        super().__init__(f"cannot listen on {host}:{port}: {reason}; {hint}")
        self.host = host
        self.port = port


class AddressNotReadyError(AgentHubError):
    """The HTTP server cannot listen yet: its address is not (yet) on the machine or its name does not resolve for
    now. At boot either may pass by itself, so it is no configuration error: `agenthub serve` exits 1, which the
    systemd unit restarts, with the same one line as `PortUnavailableError`."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"cannot listen on {host}:{port}: {reason}; {HOST_HINT}")
        self.host = host
        self.port = port


class InvalidIdError(AgentHubError, ValueError):
    """An agent, channel or chat id is not acceptable as part of a session key."""


class StorageError(AgentHubError):
    """A storage operation was refused or failed."""


class PathRefusedError(StorageError):
    """A storage path was refused: not a plain name, or a symbolic link where a real file or directory must be."""


class AgentNotFoundError(AgentHubError, LookupError):
    """The named agent is not loaded."""


class SessionBusyError(AgentHubError):
    """The session is processing a turn and the operation needs it idle."""


class LLMError(AgentHubError):
    """The model call failed; `user_text` (a catalogue text, rendered in the chat's locale) is safe to show."""

    def __init__(self, message: str, *, user_text: Text, retryable: bool = False) -> None:
        super().__init__(message)
        self.user_text = user_text
        self.retryable = retryable


class ContextOverflowError(LLMError):
    """The request was larger than the model's context window."""


class RequestRejectedError(LLMError):
    """The endpoint refused the request itself (HTTP 400), e.g. content the model does not take such as images."""


class ModelNotFoundError(LLMError):
    """The endpoint does not know the requested model (404 `not_found_error`); the loop may fall back."""

    def __init__(self, message: str, *, user_text: Text, model: str) -> None:
        super().__init__(message, user_text=user_text)
        self.model = model


class ChannelError(AgentHubError):
    """A channel failed."""


class ChannelSendError(ChannelError):
    """A platform refused or failed to deliver a message."""
