import Foundation
import PropertyBased
import Testing

import DepotCore

/// The page cursor's token alphabet: RFC 4648's URL-safe base64 without padding, one text
/// per byte string, and nothing else read back.
@Suite("Base64URL")
struct Base64URLTests {
    @Test("RFC 4648's test vectors, in the URL-safe alphabet without padding")
    func vectors() {
        let cases: [(String, String)] = [
            ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"), ("foobar", "Zm9vYmFy"),
        ]
        for (plain, encoded) in cases {
            #expect(Base64URL.encoded(Array(plain.utf8)) == encoded)
            #expect(Base64URL.decoded(encoded) == Array(plain.utf8))
        }
        // The two characters where the alphabets differ: 0xFB 0xFF is "+/8" in standard base64.
        #expect(Base64URL.encoded([0xFB, 0xFF]) == "-_8")
        #expect(Base64URL.decoded("-_8") == [0xFB, 0xFF])
    }

    @Test("any bytes: Foundation's base64 with the URL-safe alphabet and no padding, and back")
    func matchesFoundation() async {
        await propertyCheck(count: 500, input: Gen.uint8().array(of: 0...200)) { bytes in
            let expected = Data(bytes).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
            let encoded = Base64URL.encoded(bytes)
            #expect(encoded == expected)
            #expect(Base64URL.decoded(encoded) == bytes)
            #expect(Base64URL.decoded(encoded[...]) == bytes, "a substring reads as its string does")
        }
    }

    @Test("anything else is refused", arguments: [
        "Z",          // one character left over: not even one byte
        "Zm9vY",      // the same after a whole group
        "Zh",         // bits set after the last byte ("Zg" is the text of "f")
        "Zm9",        // likewise for two bytes ("Zm8")
        "Zg==",       // padding
        "Zm+v", "Zm/v", "Zm v", "Zm9v\n", "Zm\u{0}v", "Zmé",
    ])
    func refused(_ text: String) {
        #expect(Base64URL.decoded(text) == nil)
    }
}
