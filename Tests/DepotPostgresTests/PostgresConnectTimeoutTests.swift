import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A server that never answers (a partitioned network, a host whose PostgreSQL hangs) must
/// not hold a connection attempt forever: libpq's own default is to wait indefinitely.
@Suite("PostgresStore connecting to a server that never answers", .enabled(if: TestServer.available), .timeLimit(.minutes(2)))
struct PostgresConnectTimeoutTests {
    /// A TCP socket on loopback that listens and never accepts: the kernel completes the
    /// handshake, takes libpq's startup packet, and nothing ever answers it.
    final class SilentListener: @unchecked Sendable {
        let descriptor: Int32
        let port: UInt16

        init() throws {
            #if canImport(Glibc)
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            #else
            let descriptor = socket(AF_INET, SOCK_STREAM, 0)
            #endif
            guard descriptor >= 0 else { throw DepotError(.io, "socket: \(errno)") }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0, listen(descriptor, 8) == 0 else {
                close(descriptor)
                throw DepotError(.io, "bind/listen: \(errno)")
            }
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
            }
            self.descriptor = descriptor
            self.port = UInt16(bigEndian: address.sin_port)
        }

        deinit { close(descriptor) }
    }

    @Test("opening a store on a server that never answers fails with io instead of waiting forever")
    func aSilentServerIsGivenUpOn() async throws {
        let listener = try SilentListener()
        let url = "postgresql://depot:pw@127.0.0.1:\(listener.port)/depot_test?sslmode=disable"
        // Off the cooperative pool, on a thread of its own: opening blocks its thread while
        // libpq waits, and a `DispatchQueue.global()` block could wait behind the stores'
        // readers and writer lanes of every suite running beside this one (under the thread
        // sanitizer, for longer than the suite's time limit) before it even began connecting.
        let result: Result<Void, DepotError> = await withCheckedContinuation { continuation in
            let thread = Thread {
                do throws(DepotError) {
                    let store = try PostgresStore(url: url, options: .init(schema: "never", readers: 1))
                    _ = store
                    continuation.resume(returning: .success(()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
            thread.start()
        }
        withExtendedLifetime(listener) {}
        switch result {
        case .success:
            Issue.record("a server that never answered opened a store")
        case .failure(let error):
            #expect(error.code == .io, "\(error)")
            #expect(error.message.contains("timeout"), "\(error)")
            #expect(!error.message.contains(":pw@"), "\(error)")
        }
    }
}
