from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Register(_message.Message):
    __slots__ = ("name", "pid", "session", "rejoin", "resident")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    REJOIN_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    pid: int
    session: str
    rejoin: bool
    resident: _containers.RepeatedCompositeFieldContainer[Residency]
    def __init__(self, name: _Optional[str] = ..., pid: _Optional[int] = ..., session: _Optional[str] = ..., rejoin: _Optional[bool] = ..., resident: _Optional[_Iterable[_Union[Residency, _Mapping]]] = ...) -> None: ...

class Request(_message.Message):
    __slots__ = ("request_id", "count", "memory_bytes", "pin", "per_node")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PIN_FIELD_NUMBER: _ClassVar[int]
    PER_NODE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    count: int
    memory_bytes: int
    pin: _containers.RepeatedScalarFieldContainer[str]
    per_node: int
    def __init__(self, request_id: _Optional[int] = ..., count: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., pin: _Optional[_Iterable[str]] = ..., per_node: _Optional[int] = ...) -> None: ...

class Residency(_message.Message):
    __slots__ = ("device", "bytes")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    device: str
    bytes: int
    def __init__(self, device: _Optional[str] = ..., bytes: _Optional[int] = ...) -> None: ...

class Release(_message.Message):
    __slots__ = ("lease_id", "resident")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_FIELD_NUMBER: _ClassVar[int]
    lease_id: int
    resident: _containers.RepeatedCompositeFieldContainer[Residency]
    def __init__(self, lease_id: _Optional[int] = ..., resident: _Optional[_Iterable[_Union[Residency, _Mapping]]] = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    def __init__(self, request_id: _Optional[int] = ...) -> None: ...

class EvictDone(_message.Message):
    __slots__ = ("devices",)
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, devices: _Optional[_Iterable[str]] = ...) -> None: ...

class LaneOpen(_message.Message):
    __slots__ = ("client_id", "token")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    client_id: int
    token: bytes
    def __init__(self, client_id: _Optional[int] = ..., token: _Optional[bytes] = ...) -> None: ...

class ClientMessage(_message.Message):
    __slots__ = ("register", "request", "release", "cancel", "evict_done", "lane_open")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    EVICT_DONE_FIELD_NUMBER: _ClassVar[int]
    LANE_OPEN_FIELD_NUMBER: _ClassVar[int]
    register: Register
    request: Request
    release: Release
    cancel: Cancel
    evict_done: EvictDone
    lane_open: LaneOpen
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., request: _Optional[_Union[Request, _Mapping]] = ..., release: _Optional[_Union[Release, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., evict_done: _Optional[_Union[EvictDone, _Mapping]] = ..., lane_open: _Optional[_Union[LaneOpen, _Mapping]] = ...) -> None: ...

class Device(_message.Message):
    __slots__ = ("id", "name", "memory_total", "minor", "index", "node")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MINOR_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    memory_total: int
    minor: int
    index: int
    node: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., memory_total: _Optional[int] = ..., minor: _Optional[int] = ..., index: _Optional[int] = ..., node: _Optional[str] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("client_id", "devices", "policy", "lane_path", "lane_token", "recovering")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    LANE_PATH_FIELD_NUMBER: _ClassVar[int]
    LANE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RECOVERING_FIELD_NUMBER: _ClassVar[int]
    client_id: int
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    policy: str
    lane_path: str
    lane_token: bytes
    recovering: bool
    def __init__(self, client_id: _Optional[int] = ..., devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ..., policy: _Optional[str] = ..., lane_path: _Optional[str] = ..., lane_token: _Optional[bytes] = ..., recovering: _Optional[bool] = ...) -> None: ...

class Granted(_message.Message):
    __slots__ = ("request_id", "lease_id", "devices")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    lease_id: int
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    def __init__(self, request_id: _Optional[int] = ..., lease_id: _Optional[int] = ..., devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ...) -> None: ...

class Rejected(_message.Message):
    __slots__ = ("request_id", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    reason: str
    def __init__(self, request_id: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class YieldAsked(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: int
    def __init__(self, lease_id: _Optional[int] = ...) -> None: ...

class Evict(_message.Message):
    __slots__ = ("devices",)
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, devices: _Optional[_Iterable[str]] = ...) -> None: ...

class LaneReady(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServerMessage(_message.Message):
    __slots__ = ("registered", "granted", "rejected", "yield_asked", "evict", "lane_ready")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    YIELD_ASKED_FIELD_NUMBER: _ClassVar[int]
    EVICT_FIELD_NUMBER: _ClassVar[int]
    LANE_READY_FIELD_NUMBER: _ClassVar[int]
    registered: Registered
    granted: Granted
    rejected: Rejected
    yield_asked: YieldAsked
    evict: Evict
    lane_ready: LaneReady
    def __init__(self, registered: _Optional[_Union[Registered, _Mapping]] = ..., granted: _Optional[_Union[Granted, _Mapping]] = ..., rejected: _Optional[_Union[Rejected, _Mapping]] = ..., yield_asked: _Optional[_Union[YieldAsked, _Mapping]] = ..., evict: _Optional[_Union[Evict, _Mapping]] = ..., lane_ready: _Optional[_Union[LaneReady, _Mapping]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Resident(_message.Message):
    __slots__ = ("client_id", "bytes")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    client_id: int
    bytes: int
    def __init__(self, client_id: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class DeviceState(_message.Message):
    __slots__ = ("device", "holder", "lease_id", "held_seconds", "residents")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    HELD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RESIDENTS_FIELD_NUMBER: _ClassVar[int]
    device: Device
    holder: int
    lease_id: int
    held_seconds: float
    residents: _containers.RepeatedCompositeFieldContainer[Resident]
    def __init__(self, device: _Optional[_Union[Device, _Mapping]] = ..., holder: _Optional[int] = ..., lease_id: _Optional[int] = ..., held_seconds: _Optional[float] = ..., residents: _Optional[_Iterable[_Union[Resident, _Mapping]]] = ...) -> None: ...

class ClientState(_message.Message):
    __slots__ = ("client_id", "name", "pid", "waiting_count", "waiting_seconds", "on_lane", "rejoined")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    WAITING_COUNT_FIELD_NUMBER: _ClassVar[int]
    WAITING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ON_LANE_FIELD_NUMBER: _ClassVar[int]
    REJOINED_FIELD_NUMBER: _ClassVar[int]
    client_id: int
    name: str
    pid: int
    waiting_count: int
    waiting_seconds: float
    on_lane: bool
    rejoined: bool
    def __init__(self, client_id: _Optional[int] = ..., name: _Optional[str] = ..., pid: _Optional[int] = ..., waiting_count: _Optional[int] = ..., waiting_seconds: _Optional[float] = ..., on_lane: _Optional[bool] = ..., rejoined: _Optional[bool] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("policy", "quantum_seconds", "devices", "clients", "grants", "evictions", "yields_asked", "disconnects", "source", "recovering", "recovery_seconds_left", "sessions_expected", "backfill", "backfills")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    QUANTUM_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    CLIENTS_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    YIELDS_ASKED_FIELD_NUMBER: _ClassVar[int]
    DISCONNECTS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    RECOVERING_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_SECONDS_LEFT_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_EXPECTED_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_FIELD_NUMBER: _ClassVar[int]
    BACKFILLS_FIELD_NUMBER: _ClassVar[int]
    policy: str
    quantum_seconds: float
    devices: _containers.RepeatedCompositeFieldContainer[DeviceState]
    clients: _containers.RepeatedCompositeFieldContainer[ClientState]
    grants: int
    evictions: int
    yields_asked: int
    disconnects: int
    source: str
    recovering: bool
    recovery_seconds_left: float
    sessions_expected: int
    backfill: bool
    backfills: int
    def __init__(self, policy: _Optional[str] = ..., quantum_seconds: _Optional[float] = ..., devices: _Optional[_Iterable[_Union[DeviceState, _Mapping]]] = ..., clients: _Optional[_Iterable[_Union[ClientState, _Mapping]]] = ..., grants: _Optional[int] = ..., evictions: _Optional[int] = ..., yields_asked: _Optional[int] = ..., disconnects: _Optional[int] = ..., source: _Optional[str] = ..., recovering: _Optional[bool] = ..., recovery_seconds_left: _Optional[float] = ..., sessions_expected: _Optional[int] = ..., backfill: _Optional[bool] = ..., backfills: _Optional[int] = ...) -> None: ...
