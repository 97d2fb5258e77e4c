import CLMDB
package import DepotCore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Checks, before LMDB reads a page through its memory map, that every page the current
/// snapshot uses lies inside `data.mdb`.
///
/// Why: LMDB reads pages straight from the map, and touching a mapped page past the end of
/// the file kills the process with SIGBUS instead of returning an error. A truncated copy
/// (an interrupted `cp`, a disk that lost its tail) must be refused instead.
///
/// Why not simply compare the file size with `(last page + 1) × page size`: LMDB never
/// writes a page that a transaction allocated and freed again (a "loose" page). When such a
/// page is the highest one, the file ends before it although nothing uses it, and after a
/// crash that is a healthy store. LMDB keeps the invariant that every page from 2 to the
/// last one is either used by a tree or listed in the free database (its debug audit,
/// `mdb_audit`, checks exactly this). So the pages missing at the end of the file are
/// harmless if and only if every one of them is free. The free database is small (a few
/// bytes per free page) and is read here with `pread` on LMDB's own descriptor, so a
/// truncated free database is an error, not a SIGBUS. This costs nothing when the file is
/// as long as its last page (the usual case), and reads only the free database otherwise:
/// opening never walks the data.
///
/// The layout constants are those of LMDB 0.9's data format (`MDB_DATA_VERSION` 1) on a
/// 64-bit little-endian machine, which is what `mdb_env_open` has already accepted when
/// this runs.
package struct DataFileCheck {
    /// `MDB_page`: `pgno_t` number, `uint16` pad, `uint16` flags, then `uint16` lower and
    /// upper bounds (or a `uint32` overflow page count).
    static let pageHeaderSize = 16
    static let branchFlag: UInt16 = 0x01
    static let leafFlag: UInt16 = 0x02
    static let overflowFlag: UInt16 = 0x04
    /// `F_BIGDATA`: a leaf node's data lives on overflow pages; the node holds their first
    /// page number.
    static let bigDataFlag: UInt16 = 0x01
    static let metaMagic: UInt32 = 0xBEEF_C0DE
    /// `P_INVALID`: an empty tree's root.
    static let invalidPage = UInt64.max

    /// One meta page: the transaction it describes, the root of its free database and its
    /// last page.
    package struct Meta: Equatable {
        package let txnid: UInt64
        package let lastPage: UInt64
        let freeRoot: UInt64
    }

    let descriptor: Int32
    let pageSize: Int
    let path: String

    package init(descriptor: Int32, pageSize: Int, path: String) {
        self.descriptor = descriptor
        self.pageSize = pageSize
        self.path = path
    }

    /// Reads `count` bytes at `offset`, or `nil` when the file ends before them.
    func read(_ offset: Int, _ count: Int) throws(DepotError) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = bytes.withUnsafeMutableBytes { raw in
                pread(descriptor, raw.baseAddress! + done, count - done, off_t(offset + done))
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw DepotError.lmdb(errno, context: "Reading \(path)")
            }
            if n == 0 { return nil }
            done += n
        }
        return bytes
    }

    static func load<T: FixedWidthInteger>(_ bytes: [UInt8], _ offset: Int, as: T.Type) -> T? {
        guard offset >= 0, offset <= bytes.count - MemoryLayout<T>.size else { return nil }
        return bytes.withUnsafeBytes { T(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: T.self)) }
    }

    /// The meta page in `slot` (0 or 1), or `nil` when it is not a valid meta page.
    package func meta(slot: Int) throws(DepotError) -> Meta? {
        // MDB_meta after the page header: magic, version, address, map size, the free and
        // main MDB_db (48 bytes each, root last), last page, transaction id.
        guard let bytes = try read(slot * pageSize, Self.pageHeaderSize + 136) else { return nil }
        let base = Self.pageHeaderSize
        guard Self.load(bytes, base, as: UInt32.self) == Self.metaMagic,
            let freeRoot = Self.load(bytes, base + 24 + 40, as: UInt64.self),
            let last = Self.load(bytes, base + 120, as: UInt64.self),
            let txnid = Self.load(bytes, base + 128, as: UInt64.self)
        else { return nil }
        return Meta(txnid: txnid, lastPage: last, freeRoot: freeRoot)
    }

    func truncated(_ fileSize: Int, _ detail: String) -> DepotError {
        DepotError(.storeCorrupted, "\(path) is truncated: it has \(fileSize) bytes, but \(detail). It was not modified; restore it from a backup or point the store at another directory.")
    }

    /// Throws `DepotError.Code.storeCorrupted` unless every page `meta`'s snapshot uses lies
    /// within the first `fileSize` bytes.
    func check(_ meta: Meta, fileSize: Int) throws(DepotError) {
        let filePages = UInt64(fileSize / pageSize)
        // A last page no file can reach is damage (and would overflow the arithmetic below).
        guard meta.lastPage < UInt64(Int.max / pageSize) else {
            throw corrupt("its meta page names page \(meta.lastPage) as its last")
        }
        guard meta.lastPage >= filePages else { return }
        // Pages filePages...lastPage are missing: harmless only when every one is free.
        let free = try freePages(meta, filePages: filePages, fileSize: fileSize)
        let missing = meta.lastPage - filePages + 1
        let freeMissing = UInt64(free.lazy.filter { $0 >= filePages && $0 <= meta.lastPage }.count)
        if freeMissing != missing {
            throw truncated(fileSize, "its pages reach \(meta.lastPage + 1) × \(pageSize) bytes and \(missing - freeMissing) of the \(missing) missing pages hold data")
        }
    }

    /// Every page number listed in the free database of `meta`.
    private func freePages(_ meta: Meta, filePages: UInt64, fileSize: Int) throws(DepotError) -> Set<UInt64> {
        var free = Set<UInt64>()
        guard meta.freeRoot != Self.invalidPage else { return free }
        var pending = [meta.freeRoot]
        // A damaged tree could loop: a sound one has fewer pages than the file.
        var budget = filePages
        while let page = pending.popLast() {
            guard budget > 0 else { throw corrupt("its free-page database does not end") }
            budget -= 1
            let bytes = try readPage(page, filePages: filePages, fileSize: fileSize)
            guard let flags = Self.load(bytes, 10, as: UInt16.self), let lower = Self.load(bytes, 12, as: UInt16.self),
                Int(lower) >= Self.pageHeaderSize
            else { throw corrupt("free-page database page \(page) is malformed") }
            let keys = (Int(lower) - Self.pageHeaderSize) / 2
            for i in 0..<keys {
                guard let offset = Self.load(bytes, Self.pageHeaderSize + 2 * i, as: UInt16.self).map(Int.init),
                    let lo = Self.load(bytes, offset, as: UInt16.self), let hi = Self.load(bytes, offset + 2, as: UInt16.self),
                    let nodeFlags = Self.load(bytes, offset + 4, as: UInt16.self),
                    let keySize = Self.load(bytes, offset + 6, as: UInt16.self)
                else { throw corrupt("free-page database page \(page) is malformed") }
                if flags & Self.branchFlag != 0 {
                    // A branch node keeps its child's page number in its size and flags fields.
                    pending.append(UInt64(lo) | UInt64(hi) << 16 | UInt64(nodeFlags) << 32)
                } else if flags & Self.leafFlag != 0 {
                    let size = Int(lo) | Int(hi) << 16
                    let dataOffset = offset + 8 + Int(keySize)
                    let list: [UInt8]
                    if nodeFlags & Self.bigDataFlag != 0 {
                        guard let first = Self.load(bytes, dataOffset, as: UInt64.self) else {
                            throw corrupt("free-page database page \(page) is malformed")
                        }
                        list = try readOverflow(first, size: size, filePages: filePages, fileSize: fileSize)
                    } else {
                        guard dataOffset + size <= bytes.count else { throw corrupt("free-page database page \(page) is malformed") }
                        list = Array(bytes[dataOffset..<(dataOffset + size)])
                    }
                    // An ID list: its length, then that many page numbers.
                    guard list.count >= 8, let count = Self.load(list, 0, as: UInt64.self), count <= UInt64(list.count / 8 - 1) else {
                        throw corrupt("a free-page list on page \(page) is malformed")
                    }
                    for n in 0..<Int(count) {
                        if let id = Self.load(list, 8 + 8 * n, as: UInt64.self) { free.insert(id) }
                    }
                } else {
                    throw corrupt("free-page database page \(page) is neither a branch nor a leaf")
                }
            }
        }
        return free
    }

    private func corrupt(_ what: String) -> DepotError {
        DepotError(.storeCorrupted, "\(path) is damaged: \(what). It was not modified; restore it from a backup or point the store at another directory.")
    }

    private func readPage(_ page: UInt64, filePages: UInt64, fileSize: Int) throws(DepotError) -> [UInt8] {
        guard page >= 2, page < filePages else {
            throw truncated(fileSize, "its free-page database uses page \(page), which is not in the file")
        }
        guard let bytes = try read(Int(page) * pageSize, pageSize) else {
            throw truncated(fileSize, "page \(page) is missing")
        }
        return bytes
    }

    private func readOverflow(_ first: UInt64, size: Int, filePages: UInt64, fileSize: Int) throws(DepotError) -> [UInt8] {
        let header = try readPage(first, filePages: filePages, fileSize: fileSize)
        guard let flags = Self.load(header, 10, as: UInt16.self), flags & Self.overflowFlag != 0,
            let pages = Self.load(header, 12, as: UInt32.self), pages > 0,
            case let (end, overflow) = first.addingReportingOverflow(UInt64(pages)), !overflow, end <= filePages,
            size >= 0, size <= Int(pages) * pageSize - Self.pageHeaderSize
        else {
            throw truncated(fileSize, "its free-page database uses overflow pages from \(first) that are not in the file")
        }
        guard let bytes = try read(Int(first) * pageSize + Self.pageHeaderSize, size) else {
            throw truncated(fileSize, "overflow pages from \(first) are missing")
        }
        return bytes
    }
}
