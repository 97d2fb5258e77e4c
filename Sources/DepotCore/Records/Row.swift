/// A record in backend-neutral form: one ``Value`` per attribute, in the entity's
/// declaration order.
///
/// Records are written as rows, and the core keeps rows where it needs values it can
/// compare and hash: change sets, observation diffs, the memory store. Reading a record
/// does not go through a row: see ``RecordReader`` and ``ColumnReader``.
public struct Row: Sendable, Hashable {
    @usableFromInline var values: ContiguousArray<Value>

    /// An empty row.
    @inlinable public init() { values = [] }

    /// An empty row with room for `capacity` values.
    @inlinable public init(capacity: Int) {
        values = []
        values.reserveCapacity(capacity)
    }

    /// A row of `values`, in order.
    @inlinable public init(_ values: some Sequence<Value>) { self.values = ContiguousArray(values) }

    /// The number of values.
    @inlinable public var count: Int { values.count }

    /// Appends the next attribute's value.
    @inlinable public mutating func append(_ value: Value) { values.append(value) }

    /// Empties the row, keeping its storage for the next record.
    @inlinable public mutating func removeAll() { values.removeAll(keepingCapacity: true) }

    /// The raw value at a position. Backends use this; records use the typed subscript.
    @inlinable public subscript(value index: Int) -> Value {
        get { values[index] }
        set { values[index] = newValue }
    }

    /// The values, in attribute order.
    public var allValues: [Value] { Array(values) }
}
