# mypy: ignore-errors
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SiloStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SILO_STATUS_NONE: _ClassVar[SiloStatus]
    SILO_STATUS_CREATED: _ClassVar[SiloStatus]
    SILO_STATUS_JOINING: _ClassVar[SiloStatus]
    SILO_STATUS_ACTIVE: _ClassVar[SiloStatus]
    SILO_STATUS_SHUTTING_DOWN: _ClassVar[SiloStatus]
    SILO_STATUS_STOPPING: _ClassVar[SiloStatus]
    SILO_STATUS_DEAD: _ClassVar[SiloStatus]

class MembershipEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBERSHIP_EVENT_KIND_UNSPECIFIED: _ClassVar[MembershipEventKind]
    MEMBERSHIP_EVENT_KIND_JOINED: _ClassVar[MembershipEventKind]
    MEMBERSHIP_EVENT_KIND_SUSPECTED: _ClassVar[MembershipEventKind]
    MEMBERSHIP_EVENT_KIND_DECLARED_DEAD: _ClassVar[MembershipEventKind]
    MEMBERSHIP_EVENT_KIND_LEFT: _ClassVar[MembershipEventKind]
    MEMBERSHIP_EVENT_KIND_PROPERTIES_CHANGED: _ClassVar[MembershipEventKind]
SILO_STATUS_NONE: SiloStatus
SILO_STATUS_CREATED: SiloStatus
SILO_STATUS_JOINING: SiloStatus
SILO_STATUS_ACTIVE: SiloStatus
SILO_STATUS_SHUTTING_DOWN: SiloStatus
SILO_STATUS_STOPPING: SiloStatus
SILO_STATUS_DEAD: SiloStatus
MEMBERSHIP_EVENT_KIND_UNSPECIFIED: MembershipEventKind
MEMBERSHIP_EVENT_KIND_JOINED: MembershipEventKind
MEMBERSHIP_EVENT_KIND_SUSPECTED: MembershipEventKind
MEMBERSHIP_EVENT_KIND_DECLARED_DEAD: MembershipEventKind
MEMBERSHIP_EVENT_KIND_LEFT: MembershipEventKind
MEMBERSHIP_EVENT_KIND_PROPERTIES_CHANGED: MembershipEventKind

class SiloAddress(_message.Message):
    __slots__ = ("host", "port", "generation")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: int
    generation: int
    def __init__(self, host: _Optional[str] = ..., port: _Optional[int] = ..., generation: _Optional[int] = ...) -> None: ...

class RequestHeader(_message.Message):
    __slots__ = ("cluster_id", "sender")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    sender: SiloAddress
    def __init__(self, cluster_id: _Optional[str] = ..., sender: _Optional[_Union[SiloAddress, _Mapping]] = ...) -> None: ...

class PingRequest(_message.Message):
    __slots__ = ("header", "sequence", "known_version")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    sequence: int
    known_version: int
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., sequence: _Optional[int] = ..., known_version: _Optional[int] = ...) -> None: ...

class PingResponse(_message.Message):
    __slots__ = ("responder", "health_score", "sequence")
    RESPONDER_FIELD_NUMBER: _ClassVar[int]
    HEALTH_SCORE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    responder: SiloAddress
    health_score: int
    sequence: int
    def __init__(self, responder: _Optional[_Union[SiloAddress, _Mapping]] = ..., health_score: _Optional[int] = ..., sequence: _Optional[int] = ...) -> None: ...

class ProbeIndirectlyRequest(_message.Message):
    __slots__ = ("header", "target", "timeout_seconds")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    target: SiloAddress
    timeout_seconds: float
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., target: _Optional[_Union[SiloAddress, _Mapping]] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class ProbeIndirectlyResponse(_message.Message):
    __slots__ = ("succeeded", "intermediary_health_score", "response_time_seconds", "failure_message")
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    INTERMEDIARY_HEALTH_SCORE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_TIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    succeeded: bool
    intermediary_health_score: int
    response_time_seconds: float
    failure_message: str
    def __init__(self, succeeded: _Optional[bool] = ..., intermediary_health_score: _Optional[int] = ..., response_time_seconds: _Optional[float] = ..., failure_message: _Optional[str] = ...) -> None: ...

class GossipRequest(_message.Message):
    __slots__ = ("header", "version", "delta", "relay_to", "sequence")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    RELAY_TO_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    version: int
    delta: MembershipDelta
    relay_to: _containers.RepeatedCompositeFieldContainer[SiloAddress]
    sequence: int
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., version: _Optional[int] = ..., delta: _Optional[_Union[MembershipDelta, _Mapping]] = ..., relay_to: _Optional[_Iterable[_Union[SiloAddress, _Mapping]]] = ..., sequence: _Optional[int] = ...) -> None: ...

class MembershipDelta(_message.Message):
    __slots__ = ("base_version", "version_etag", "rows", "since_version")
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_ETAG_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SINCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    base_version: int
    version_etag: str
    rows: _containers.RepeatedCompositeFieldContainer[MembershipRow]
    since_version: int
    def __init__(self, base_version: _Optional[int] = ..., version_etag: _Optional[str] = ..., rows: _Optional[_Iterable[_Union[MembershipRow, _Mapping]]] = ..., since_version: _Optional[int] = ...) -> None: ...

class GossipResponse(_message.Message):
    __slots__ = ("sequence",)
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    def __init__(self, sequence: _Optional[int] = ...) -> None: ...

class GetMembershipRequest(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ...) -> None: ...

class ConfirmMembershipRequest(_message.Message):
    __slots__ = ("header", "known_version")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    known_version: int
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., known_version: _Optional[int] = ...) -> None: ...

class ConfirmMembershipResponse(_message.Message):
    __slots__ = ("responder", "table_read", "asker_status", "version", "newest_version_heard", "unconfirmed_writes")
    RESPONDER_FIELD_NUMBER: _ClassVar[int]
    TABLE_READ_FIELD_NUMBER: _ClassVar[int]
    ASKER_STATUS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NEWEST_VERSION_HEARD_FIELD_NUMBER: _ClassVar[int]
    UNCONFIRMED_WRITES_FIELD_NUMBER: _ClassVar[int]
    responder: SiloAddress
    table_read: bool
    asker_status: SiloStatus
    version: int
    newest_version_heard: int
    unconfirmed_writes: bool
    def __init__(self, responder: _Optional[_Union[SiloAddress, _Mapping]] = ..., table_read: _Optional[bool] = ..., asker_status: _Optional[_Union[SiloStatus, str]] = ..., version: _Optional[int] = ..., newest_version_heard: _Optional[int] = ..., unconfirmed_writes: _Optional[bool] = ...) -> None: ...

class SuspicionVote(_message.Message):
    __slots__ = ("by", "at_unix_micros")
    BY_FIELD_NUMBER: _ClassVar[int]
    AT_UNIX_MICROS_FIELD_NUMBER: _ClassVar[int]
    by: SiloAddress
    at_unix_micros: int
    def __init__(self, by: _Optional[_Union[SiloAddress, _Mapping]] = ..., at_unix_micros: _Optional[int] = ...) -> None: ...

class MembershipRow(_message.Message):
    __slots__ = ("address", "status", "silo_name", "host_name", "role_name", "proxy_port", "update_zone", "fault_zone", "start_time_unix_micros", "i_am_alive_time_unix_micros", "suspicions", "properties", "etag")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SILO_NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_NAME_FIELD_NUMBER: _ClassVar[int]
    PROXY_PORT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_ZONE_FIELD_NUMBER: _ClassVar[int]
    FAULT_ZONE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_UNIX_MICROS_FIELD_NUMBER: _ClassVar[int]
    I_AM_ALIVE_TIME_UNIX_MICROS_FIELD_NUMBER: _ClassVar[int]
    SUSPICIONS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    address: SiloAddress
    status: SiloStatus
    silo_name: str
    host_name: str
    role_name: str
    proxy_port: int
    update_zone: int
    fault_zone: int
    start_time_unix_micros: int
    i_am_alive_time_unix_micros: int
    suspicions: _containers.RepeatedCompositeFieldContainer[SuspicionVote]
    properties: _containers.ScalarMap[str, str]
    etag: str
    def __init__(self, address: _Optional[_Union[SiloAddress, _Mapping]] = ..., status: _Optional[_Union[SiloStatus, str]] = ..., silo_name: _Optional[str] = ..., host_name: _Optional[str] = ..., role_name: _Optional[str] = ..., proxy_port: _Optional[int] = ..., update_zone: _Optional[int] = ..., fault_zone: _Optional[int] = ..., start_time_unix_micros: _Optional[int] = ..., i_am_alive_time_unix_micros: _Optional[int] = ..., suspicions: _Optional[_Iterable[_Union[SuspicionVote, _Mapping]]] = ..., properties: _Optional[_Mapping[str, str]] = ..., etag: _Optional[str] = ...) -> None: ...

class GetMembershipResponse(_message.Message):
    __slots__ = ("version", "version_etag", "rows", "responder")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_ETAG_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    RESPONDER_FIELD_NUMBER: _ClassVar[int]
    version: int
    version_etag: str
    rows: _containers.RepeatedCompositeFieldContainer[MembershipRow]
    responder: SiloAddress
    def __init__(self, version: _Optional[int] = ..., version_etag: _Optional[str] = ..., rows: _Optional[_Iterable[_Union[MembershipRow, _Mapping]]] = ..., responder: _Optional[_Union[SiloAddress, _Mapping]] = ...) -> None: ...

class WatchMembershipRequest(_message.Message):
    __slots__ = ("header", "after_version")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    AFTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    after_version: int
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., after_version: _Optional[int] = ...) -> None: ...

class MembershipEvent(_message.Message):
    __slots__ = ("kind", "silo", "silo_name", "version", "at_unix_micros", "observed_at_unix_micros", "by", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    SILO_FIELD_NUMBER: _ClassVar[int]
    SILO_NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    AT_UNIX_MICROS_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_UNIX_MICROS_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    kind: MembershipEventKind
    silo: SiloAddress
    silo_name: str
    version: int
    at_unix_micros: int
    observed_at_unix_micros: int
    by: _containers.RepeatedCompositeFieldContainer[SiloAddress]
    properties: _containers.ScalarMap[str, str]
    def __init__(self, kind: _Optional[_Union[MembershipEventKind, str]] = ..., silo: _Optional[_Union[SiloAddress, _Mapping]] = ..., silo_name: _Optional[str] = ..., version: _Optional[int] = ..., at_unix_micros: _Optional[int] = ..., observed_at_unix_micros: _Optional[int] = ..., by: _Optional[_Iterable[_Union[SiloAddress, _Mapping]]] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class MembershipView(_message.Message):
    __slots__ = ("version", "version_etag", "rows", "responder", "events")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_ETAG_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    RESPONDER_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    version: int
    version_etag: str
    rows: _containers.RepeatedCompositeFieldContainer[MembershipRow]
    responder: SiloAddress
    events: _containers.RepeatedCompositeFieldContainer[MembershipEvent]
    def __init__(self, version: _Optional[int] = ..., version_etag: _Optional[str] = ..., rows: _Optional[_Iterable[_Union[MembershipRow, _Mapping]]] = ..., responder: _Optional[_Union[SiloAddress, _Mapping]] = ..., events: _Optional[_Iterable[_Union[MembershipEvent, _Mapping]]] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ...) -> None: ...

class DrainResponse(_message.Message):
    __slots__ = ("silo", "already_draining")
    SILO_FIELD_NUMBER: _ClassVar[int]
    ALREADY_DRAINING_FIELD_NUMBER: _ClassVar[int]
    silo: SiloAddress
    already_draining: bool
    def __init__(self, silo: _Optional[_Union[SiloAddress, _Mapping]] = ..., already_draining: _Optional[bool] = ...) -> None: ...

class WorkItem(_message.Message):
    __slots__ = ("key", "payload")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    key: str
    payload: bytes
    def __init__(self, key: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...

class ProcessRequest(_message.Message):
    __slots__ = ("cluster_id", "sender", "handler", "items", "arrow_batch", "view_version", "key_hash")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    HANDLER_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    ARROW_BATCH_FIELD_NUMBER: _ClassVar[int]
    VIEW_VERSION_FIELD_NUMBER: _ClassVar[int]
    KEY_HASH_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    sender: str
    handler: str
    items: _containers.RepeatedCompositeFieldContainer[WorkItem]
    arrow_batch: bytes
    view_version: int
    key_hash: str
    def __init__(self, cluster_id: _Optional[str] = ..., sender: _Optional[str] = ..., handler: _Optional[str] = ..., items: _Optional[_Iterable[_Union[WorkItem, _Mapping]]] = ..., arrow_batch: _Optional[bytes] = ..., view_version: _Optional[int] = ..., key_hash: _Optional[str] = ...) -> None: ...

class ProcessResponse(_message.Message):
    __slots__ = ("silo", "results", "arrow_results", "handler_seconds", "serialization_seconds", "fencing_token")
    SILO_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ARROW_RESULTS_FIELD_NUMBER: _ClassVar[int]
    HANDLER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SERIALIZATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    silo: str
    results: _containers.RepeatedScalarFieldContainer[bytes]
    arrow_results: bytes
    handler_seconds: float
    serialization_seconds: float
    fencing_token: int
    def __init__(self, silo: _Optional[str] = ..., results: _Optional[_Iterable[bytes]] = ..., arrow_results: _Optional[bytes] = ..., handler_seconds: _Optional[float] = ..., serialization_seconds: _Optional[float] = ..., fencing_token: _Optional[int] = ...) -> None: ...
