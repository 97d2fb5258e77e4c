public import DepotCore
import Foundation

// The crash-safety workload, shared by the `depot-crash-writer` helper (which writes it
// until it is killed) and DepotReliabilityTests (which checks the store afterwards). Every
// transaction leaves evidence that makes a half-applied one detectable: a commit row that
// states how many entries it wrote and their checksum, and transfers that keep the sum of
// all balances constant.

/// One row written by a crash-workload transaction.
public struct LedgerEntry: StoredObject, Hashable {
    /// `txn << 24 | position`, so every transaction owns a disjoint key range.
    public var id: Int64
    /// The transaction that wrote the entry.
    public var txn: Int64
    /// The entry's payload.
    public var payload: String
    /// ``CrashWorkload/checksum(txn:position:payload:)`` of this entry.
    public var checksum: Int64

    /// The entity, declared by hand.
    public static let entity = Entity<LedgerEntry>("LedgerEntry", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("txn", \.txn, indexed: true)
        Attribute("payload", \.payload)
        Attribute("checksum", \.checksum)
    }

    /// An entry with the given values.
    public init(id: Int64, txn: Int64, payload: String, checksum: Int64) {
        self.id = id
        self.txn = txn
        self.payload = payload
        self.checksum = checksum
    }

    /// Reads the entry from a stored row.
    public init(row: RecordReader<Self>) throws {
        id = try row[\.id]
        txn = try row[\.txn]
        payload = try row[\.payload]
        checksum = try row[\.checksum]
    }
}

/// The evidence of one committed crash-workload transaction.
public struct LedgerCommit: StoredObject, Hashable {
    /// The transaction number: 1, 2, 3… with no gaps.
    public var id: Int64
    /// How many entries the transaction wrote.
    public var entries: Int64
    /// The wrapping sum of the entries' checksums.
    public var checksum: Int64
    /// The later transaction that deleted this one's entries, if any.
    public var deletedBy: Int64?

    /// The entity, declared by hand.
    public static let entity = Entity<LedgerCommit>("LedgerCommit", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("entries", \.entries)
        Attribute("checksum", \.checksum)
        Attribute("deletedBy", \.deletedBy)
    }

    /// A commit record with the given values.
    public init(id: Int64, entries: Int64, checksum: Int64, deletedBy: Int64?) {
        self.id = id
        self.entries = entries
        self.checksum = checksum
        self.deletedBy = deletedBy
    }

    /// Reads the commit record from a stored row.
    public init(row: RecordReader<Self>) throws {
        id = try row[\.id]
        entries = try row[\.entries]
        checksum = try row[\.checksum]
        deletedBy = try row[\.deletedBy]
    }
}

/// What one crash-workload transaction does, drawn before the transaction starts so that
/// the write closure has no outside side effects (LMDB may run it twice).
public struct LedgerPlan: Sendable {
    /// The payloads of the entries to write, one entry each.
    public var payloads: [String]
    /// (from, to, amount) between ``CrashWorkload/accountCount`` accounts.
    public var transfers: [(Int, Int, Int64)]
    /// Delete the entries of the transaction this many before the new one (0: none).
    public var deleteBack: Int64

    /// A plan with the given steps.
    public init(payloads: [String], transfers: [(Int, Int, Int64)], deleteBack: Int64) {
        self.payloads = payloads
        self.transfers = transfers
        self.deleteBack = deleteBack
    }
}

/// The crash-safety workload's shape and checks: ledger entries with a commit record per
/// transaction, and transfers between accounts whose balances keep a constant sum.
public enum CrashWorkload {
    /// The number of accounts transfers move money between.
    public static let accountCount = 8
    /// Each account's balance at the start.
    public static let initialBalance: Int64 = 1_000
    /// The sum of all balances, which every committed transaction keeps.
    public static var total: Int64 { Int64(accountCount) * initialBalance }

    /// The primary key of account number `index`.
    public static func accountID(_ index: Int) -> String { "acct-\(index)" }

    /// The workload's entities as registered with one store.
    public struct Entities: Sendable {
        /// The handle of ``LedgerEntry``.
        public let entries: EntityHandle
        /// The handle of ``LedgerCommit``.
        public let commits: EntityHandle
        /// The handle of the accounts (``Account``).
        public let accounts: EntityHandle
    }

    /// Registers the workload's entities.
    @discardableResult
    public static func register(_ store: any Store) async throws -> Entities {
        let handles = try await store.register(LedgerEntry.self, LedgerCommit.self, Account.self)
        guard handles.count == 3 else {
            throw DepotError(.invalidSchema, "The \(store.backendName) store returned \(handles.count) handles for 3 entities.")
        }
        return Entities(entries: handles[0], commits: handles[1], accounts: handles[2])
    }

    /// FNV-1a over the entry's identity and payload: a changed, torn or misplaced entry
    /// no longer matches.
    ///
    /// The check after every kill hashes every stored payload, in a debug build: it walks
    /// contiguous bytes, since iterating `String.UTF8View` there cost most of the crash
    /// tests' time at full size.
    public static func checksum(txn: Int64, position: Int, payload: String) -> Int64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        func mix(_ bytes: UnsafeRawBufferPointer) {
            for index in 0..<bytes.count {
                hash = (hash ^ UInt64(bytes[index])) &* 0x0000_0100_0000_01B3
            }
        }
        withUnsafeBytes(of: txn.littleEndian, mix)
        withUnsafeBytes(of: Int64(position).littleEndian, mix)
        var payload = payload
        payload.withUTF8 { mix(UnsafeRawBufferPointer($0)) }
        return Int64(bitPattern: hash)
    }

    /// Draws a transaction: mostly small, sometimes hundreds or thousands of entries, so
    /// that kills land inside commits of every size (one page, many pages, a map growth).
    public static func plan(using generator: inout some RandomNumberGenerator) -> LedgerPlan {
        let roll = Int.random(in: 0..<100, using: &generator)
        let count: Int
        switch roll {
        case 0..<70: count = Int.random(in: 1...20, using: &generator)
        case 70..<96: count = Int.random(in: 21...300, using: &generator)
        default: count = Int.random(in: 301...3_000, using: &generator)
        }
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzé😀\u{0}'\"".unicodeScalars)
        var payloads: [String] = []
        payloads.reserveCapacity(count)
        for _ in 0..<count {
            let length = Int.random(in: 0...(Bool.random(using: &generator) ? 16 : 1_500), using: &generator)
            var text = String.UnicodeScalarView()
            for _ in 0..<length { text.append(alphabet[Int.random(in: 0..<alphabet.count, using: &generator)]) }
            payloads.append(String(text))
        }
        var transfers: [(Int, Int, Int64)] = []
        for _ in 0..<Int.random(in: 0...4, using: &generator) {
            transfers.append((
                Int.random(in: 0..<accountCount, using: &generator), Int.random(in: 0..<accountCount, using: &generator),
                Int64.random(in: 1...500, using: &generator)
            ))
        }
        // Deleting often keeps the live data small, so that checking it after every kill
        // stays cheap however long the run.
        let deleteBack = Int.random(in: 0..<3, using: &generator) == 0 ? 0 : Int64.random(in: 1...6, using: &generator)
        return LedgerPlan(payloads: payloads, transfers: transfers, deleteBack: deleteBack)
    }

    /// Runs one planned transaction; returns its number once it has committed.
    public static func commit(_ plan: LedgerPlan, to store: any Store, _ entities: Entities) async throws -> Int64 {
        try await store.write { transaction in
            let commits = Context<LedgerCommit, LedgerCommit>(transaction, entity: entities.commits)
            let entries = Context<LedgerEntry, LedgerEntry>(transaction, entity: entities.entries)
            let accounts = Context<Account, Account>(transaction, entity: entities.accounts)
            // The number comes from the store inside the transaction, so several writer
            // processes on one store still number their commits 1, 2, 3… without gaps.
            let last = try commits.fetchFirst(Request<LedgerCommit>().sorted(by: \.id, ascending: false))
            let txn = (last?.id ?? 0) + 1
            if txn == 1 {
                for index in 0..<accountCount {
                    try accounts.insert(Account(id: accountID(index), owner: "owner-\(index)", balance: initialBalance))
                }
            }
            var sum: Int64 = 0
            for (position, payload) in plan.payloads.enumerated() {
                let checksum = checksum(txn: txn, position: position, payload: payload)
                sum &+= checksum
                try entries.insert(LedgerEntry(id: txn << 24 | Int64(position), txn: txn, payload: payload, checksum: checksum))
            }
            for (from, to, amount) in plan.transfers where from != to {
                guard var source = try accounts.fetchOne(id: accountID(from)),
                    var target = try accounts.fetchOne(id: accountID(to))
                else { throw DepotError(.notFound, "crash workload: an account is missing in transaction \(txn)") }
                source.balance -= amount
                target.balance += amount
                try accounts.update([source, target])
            }
            if plan.deleteBack > 0, txn - plan.deleteBack >= 1, var old = try commits.fetchOne(id: txn - plan.deleteBack),
                old.deletedBy == nil
            {
                let deleted = try entries.deleteAll(where: \.txn == old.id)
                guard deleted == Int(old.entries) else {
                    throw DepotError(.storeCorrupted, "crash workload: transaction \(old.id) had \(deleted) entries, its commit row says \(old.entries)")
                }
                old.deletedBy = txn
                try commits.update(old)
            }
            try commits.insert(LedgerCommit(id: txn, entries: Int64(plan.payloads.count), checksum: sum, deletedBy: nil))
            return txn
        }
    }

    /// What a check of a store found.
    public struct Verdict: Sendable {
        /// The highest committed transaction number (0 for an empty store).
        public var lastCommitted: Int64
        /// Entries currently stored.
        public var entries: Int
        /// Every broken invariant, in words; empty when the store is consistent.
        public var problems: [String]
    }

    /// Reads the whole store in one snapshot and checks that every committed transaction is
    /// complete, that no entry belongs to a transaction that did not commit, and that the
    /// balances still sum to ``total``.
    public static func verify(_ store: any Store) async throws -> Verdict {
        let entities = try await register(store)
        return try await store.read { transaction in
            let commits = try ReadContext<LedgerCommit, LedgerCommit>(transaction, entity: entities.commits).fetchAll()
            let entries = try ReadContext<LedgerEntry, LedgerEntry>(transaction, entity: entities.entries).fetchAll()
            let accounts = try ReadContext<Account, Account>(transaction, entity: entities.accounts).fetchAll()
            var problems: [String] = []
            for (index, commit) in commits.enumerated() where commit.id != Int64(index + 1) {
                problems.append("commit numbers have a gap: position \(index + 1) holds transaction \(commit.id)")
                break
            }
            let last = commits.last?.id ?? 0
            var byTxn: [Int64: (count: Int64, sum: Int64)] = [:]
            for entry in entries {
                let position = Int(entry.id & 0xFF_FFFF)
                if entry.id >> 24 != entry.txn || checksum(txn: entry.txn, position: position, payload: entry.payload) != entry.checksum {
                    problems.append("entry \(entry.id) of transaction \(entry.txn) is damaged")
                }
                byTxn[entry.txn, default: (0, 0)].count += 1
                byTxn[entry.txn, default: (0, 0)].sum &+= entry.checksum
            }
            for commit in commits {
                let found = byTxn.removeValue(forKey: commit.id) ?? (0, 0)
                if let deleter = commit.deletedBy {
                    if found.count != 0 { problems.append("transaction \(commit.id) was deleted by \(deleter) but \(found.count) entries remain") }
                    if deleter <= commit.id || deleter > last { problems.append("transaction \(commit.id) names an impossible deleter \(deleter)") }
                } else if found.count != commit.entries || found.sum != commit.checksum {
                    problems.append("transaction \(commit.id) is half-applied: \(found.count) of \(commit.entries) entries, checksum \(found.sum == commit.checksum ? "ok" : "wrong")")
                }
            }
            for (txn, found) in byTxn.sorted(by: { $0.key < $1.key }) {
                problems.append("\(found.count) entries of transaction \(txn), which has no commit row")
            }
            if last > 0 {
                let sum = accounts.reduce(Int64(0)) { $0 + $1.balance }
                if accounts.count != accountCount || sum != total {
                    problems.append("\(accounts.count) accounts hold \(sum) in total, expected \(accountCount) holding \(total)")
                }
            } else if !accounts.isEmpty || !entries.isEmpty {
                problems.append("no commit row, but \(accounts.count) accounts and \(entries.count) entries")
            }
            return Verdict(lastCommitted: last, entries: entries.count, problems: problems)
        }
    }

    /// The acknowledged transaction numbers in a side log: one decimal number per line. A
    /// last line without its newline was being written when the process died; it does not
    /// count (the commit it names was not yet acknowledged).
    public static func acknowledged(inLog text: String) -> [Int64] {
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        if text.last != "\n" { lines.removeLast() }
        return lines.compactMap { Int64($0) }
    }
}
