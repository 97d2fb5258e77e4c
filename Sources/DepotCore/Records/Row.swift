/// A record in backend-neutral form: one ``Value`` per attribute, in the entity's
/// declaration order.
///
/// Backends reuse one `Row` buffer while they step through results, so decoding a record
/// costs no allocation beyond the record itself. Read typed values by position:
///
/// ```swift
/// init(row: Row) throws {
///     id = try row[0]
///     name = try row[1]
/// }
/// ```
public struct Row: Sendable, Hashable {
    @usableFromInline var values: ContiguousArray<Value>

    @inlinable public init() { values = [] }

    @inlinable public init(capacity: Int) {
        values = []
        values.reserveCapacity(capacity)
    }

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

    /// The value at `index`, converted to the attribute's Swift type.
    ///
    /// - Throws: ``DepotError/Code/conversionFailed`` when the position is out of range or
    ///   the stored value does not fit `T`.
    @inlinable public subscript<T: AttributeValue>(_ index: Int) -> T {
        get throws(DepotError) {
            guard index >= 0 && index < values.count else {
                throw DepotError(.conversionFailed, "The row has \(values.count) values; position \(index) does not exist. Check the record's init(row:) against its entity's attributes.")
            }
            return try T(value: values[index])
        }
    }

    /// The values, in attribute order.
    public var allValues: [Value] { Array(values) }
}
