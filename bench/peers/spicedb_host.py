"""An embedded SpiceDB served over gRPC, for the peer benchmark.

``spicedb-embedded`` runs SpiceDB's own Go code inside this process (a C-shared library)
and answers unary calls through its FFI; its built-in listener serves streaming calls
only. This process makes it a server the benchmark's asyncio client can reach like any
other: a gRPC server whose CheckPermission and CheckBulkPermissions hand the request's
bytes to the library untouched and return its reply's bytes (no re-encoding here), on
threads (the FFI call releases the GIL). Its CPU is the server CPU of SpiceDB's figures.

Its Python server takes calls from gRPC's core one at a time; calls not yet taken wait in
the core, which rejects new ones at random past 1,000 waiting (all past 3,000) and the
client sees CANCELLED. So its clients keep a bounded number outstanding (``peer.each``).

    SPICEDB_LIBRARY_PATH=.../libspicedb.so python spicedb_host.py PORT
"""

from __future__ import annotations

import ctypes
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc
from authzed.api.v1 import (
    ObjectReference,
    Relationship,
    RelationshipUpdate,
    SubjectReference,
    WriteRelationshipsRequest,
)
from spicedb_embedded import EmbeddedSpiceDB, ffi

sys.path.insert(0, str(Path(__file__).resolve().parent))
import facts

SERVICE = "authzed.api.v1.PermissionsService"
#: SpiceDB's default limit of updates per WriteRelationships.
WRITE_CHUNK = 1000


def _identity(data: bytes) -> bytes:
    return data


def main(port: int) -> None:
    # spicedb-embedded 0.7.1 declares spicedb_free's argument as char* but hands it an
    # address: every error report would fail with a TypeError instead of SpiceDB's message.
    ffi._get_lib().spicedb_free.argtypes = [ctypes.c_void_p]
    db = EmbeddedSpiceDB.start(facts.SPICEDB_SCHEMA, [])
    rels = facts.spicedb_relationships()
    for start in range(0, len(rels), WRITE_CHUNK):
        request = WriteRelationshipsRequest(updates=[
            RelationshipUpdate(
                operation=RelationshipUpdate.Operation.OPERATION_TOUCH,
                relationship=Relationship(
                    resource=ObjectReference(object_type=rt, object_id=rid), relation=rel,
                    subject=SubjectReference(
                        object=ObjectReference(object_type=st, object_id=sid),
                        optional_relation=srel)))
            for rt, rid, rel, st, sid, srel in rels[start : start + WRITE_CHUNK]])
        ffi.spicedb_permissions_write_relationships(db._handle, request.SerializeToString())
    handle = db._handle

    def check(request: bytes, _context: grpc.ServicerContext) -> bytes:
        return ffi.spicedb_permissions_check_permission(handle, request)

    def bulk(request: bytes, _context: grpc.ServicerContext) -> bytes:
        return ffi.spicedb_permissions_check_bulk_permissions(handle, request)

    handlers = {
        "CheckPermission": grpc.unary_unary_rpc_method_handler(
            check, request_deserializer=_identity, response_serializer=_identity),
        "CheckBulkPermissions": grpc.unary_unary_rpc_method_handler(
            bulk, request_deserializer=_identity, response_serializer=_identity),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                         options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(int(sys.argv[1]))
