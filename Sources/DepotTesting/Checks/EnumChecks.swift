import DepotCore

/// `RawRepresentable` enums as attributes: stored as their raw values, filtered and sorted
/// by them, and an unknown raw value is an error when read, never a trap or a skipped record.
enum EnumChecks {
    static let critters: [Critter] = [
        Critter(id: 1, mood: .playful, size: .small),
        Critter(id: 2, mood: .calm, size: .large, formerMood: .grumpy),
        Critter(id: 3, mood: .grumpy, size: .medium),
        Critter(id: 4, mood: .calm, size: .small, formerMood: .playful),
    ]

    static let all: [ConformanceCheck] = [
        ConformanceCheck("enum attributes round-trip as their raw values") { store in
            let pets = Controller<Critter, Critter>(store: store)
            try await pets.save(critters)
            try await expectEqual(pets.fetchAll(Request<Critter>().sorted(by: \.id)), critters, "every critter back")
            let raw = Controller<CritterRaw, CritterRaw>(store: store)
            try await expectEqual(
                raw.fetchOne(id: 2), CritterRaw(id: 2, mood: "calm", size: 3, formerMood: "grumpy"),
                "stored as the raw values")
        },
        ConformanceCheck("enum attributes filter and sort by their raw values") { store in
            let pets = Controller<Critter, Critter>(store: store)
            try await pets.save(critters)
            try await expectEqual(pets.fetchAll(Request(\.mood == .calm).sorted(by: \.id)).map(\.id), [2, 4], "equality")
            try await expectEqual(pets.fetchAll(Request(\.size > .small).sorted(by: \.id)).map(\.id), [2, 3], "integer order")
            try await expectEqual(pets.fetchAll(Request(\.formerMood == .grumpy)).map(\.id), [2], "optional")
            try await expectEqual(pets.count(Request(.isNil(\.formerMood))), 2, "nil optional")
            try await expectEqual(
                pets.fetchAll(Request(.in(\.mood, [Mood.grumpy, .playful])).sorted(by: \.id)).map(\.id), [1, 3], "in")
            // calm < grumpy < playful as strings; large (3) first when descending by size.
            try await expectEqual(
                pets.fetchAll(Request<Critter>().sorted(by: \.mood).sorted(by: \.id)).map(\.id), [2, 4, 3, 1], "sorted by mood")
            try await expectEqual(
                pets.fetchAll(Request<Critter>().sorted(by: \.size, ascending: false).sorted(by: \.id)).map(\.id),
                [2, 3, 1, 4], "sorted by size")
        },
        ConformanceCheck("an unknown raw value is a conversion error") { store in
            let raw = Controller<CritterRaw, CritterRaw>(store: store)
            try await raw.save([
                CritterRaw(id: 1, mood: "sulky", size: 1),
                CritterRaw(id: 2, mood: "calm", size: 7),
                CritterRaw(id: 3, mood: "calm", size: 1, formerMood: "bored"),
                CritterRaw(id: 4, mood: "calm", size: 1),
            ])
            let pets = Controller<Critter, Critter>(store: store)
            for id: Int64 in 1...3 {
                try await expectError(.conversionFailed, "critter \(id)") { try await pets.fetchOne(id: id) }
            }
            try await expectError(.conversionFailed, "fetchAll with unreadable records") { try await pets.fetchAll() }
            try await expectEqual(pets.fetchOne(id: 4), Critter(id: 4, mood: .calm, size: .small), "a readable record")
        },
    ]
}
