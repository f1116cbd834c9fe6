import Foundation
@testable import ObjectGraph
import TestSupport
import Testing

@Suite struct FileTextTests {
    // MARK: - Values

    @Test func datesRoundTripExactly() {
        var random = SplitMix64(seed: 11)
        var dates: [Date] = [Date(timeIntervalSinceReferenceDate: 0), Date(timeIntervalSinceReferenceDate: -0.5),
                             Date(timeIntervalSince1970: 0), Date(timeIntervalSinceReferenceDate: 1e-7),
                             Date(timeIntervalSinceReferenceDate: -62_135_596_800), Date(timeIntervalSinceReferenceDate: 252_423_993_599.999)]
        for _ in 0..<5000 {
            let bits = random.next()
            let seconds = Double(Int64(bitPattern: bits) % 20_000_000_000) / 3.0 + Double(bits % 1000) / 997
            dates.append(Date(timeIntervalSinceReferenceDate: seconds))
        }
        for date in dates {
            let text = AttributeText.format(date: date)
            #expect(AttributeText.parseDate(text) == date, "\(text) read back as \(AttributeText.parseDate(text).map { "\($0.timeIntervalSinceReferenceDate)" } ?? "nil"), not \(date.timeIntervalSinceReferenceDate)")
        }
    }

    @Test func datesAreISO8601InUTC() {
        #expect(AttributeText.format(date: Date(timeIntervalSinceReferenceDate: 0)) == "2001-01-01T00:00:00Z")
        #expect(AttributeText.format(date: Date(timeIntervalSinceReferenceDate: -0.25)) == "2000-12-31T23:59:59.75Z")
        #expect(AttributeText.format(date: Date(timeIntervalSince1970: 951_782_400)) == "2000-02-29T00:00:00Z")
        #expect(AttributeText.parseDate("2024-03-01") == Date(timeIntervalSince1970: 1_709_251_200))
        #expect(AttributeText.parseDate("2024-03-01T02:30:00+02:30") == Date(timeIntervalSince1970: 1_709_251_200))
        #expect(AttributeText.parseDate("2024-03-01T00:00:00-01:00") == Date(timeIntervalSince1970: 1_709_254_800))
        for bad in ["2023-02-29", "2024-13-01", "2024-01-01T24:00:00Z", "2024-01-01T00:00:00", "2024-01-01 00:00:00Z",
                    "yesterday", "", "2024-01-01T00:00:00.Z", "2024-01-01T00:00:00Zjunk"] {
            #expect(AttributeText.parseDate(bad) == nil, "\(bad) parsed")
        }
    }

    static let valueCases: [(AttributeType, String, AttributeValue?)] = [
        (.integer16, "-32768", AttributeValue.integer(-32768)), (.integer16, "32768", nil), (.integer64, "9223372036854775807", .integer(.max)),
        (.integer32, "1e3", nil), (.integer32, " 1", nil), (.double, "0.30000000000000004", .double(0.1 + 0.2)), (.double, "-Infinity", .double(-.infinity)),
        (.double, "NaN", nil), (.double, "nan", nil), (.double, "inf", nil), (.double, "0x1p3", nil), (.double, "1e400", .double(.infinity)),
        (.double, "-0x10", nil), (.double, "1E3", .double(1000)), (.double, "+.5e-1", .double(0.05)), (.double, "-inf", nil), (.double, "1.5é", nil),
        (.double, "٣", nil), (.double, "", nil), (.double, " 1", nil), (.double, "1 ", nil), (.double, "-", nil), (.double, "infinity", nil),
        (.float, "3.4028235e+38", .float(.greatestFiniteMagnitude)), (.float, "1e39", nil), (.float, "0.1", .float(0.1)),
        (.decimal, "-1234.5678", .decimal(Decimal(string: "-1234.5678")!)), (.decimal, "1,5", nil), (.decimal, "", nil),
        (.boolean, "true", .boolean(true)), (.boolean, "TRUE", nil), (.boolean, "1", nil),
        (.uuid, "e621e1f8-c36c-495a-93fc-0c247a3e6e5f", .uuid(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!)),
        (.binaryData, "AAH/", .data(Data([0, 1, 255]))), (.binaryData, "***", nil), (.uri, "", nil), (.string, "", .string("")),
    ]

    @Test(arguments: valueCases)
    func valuesParseStrictly(type: AttributeType, text: String, expected: AttributeValue?) throws {
        let parsed = try? AttributeText.parse(text, as: type).get()
        #expect(parsed == expected)
        if let parsed { #expect(try AttributeText.parse(AttributeText.format(parsed), as: type).get() == parsed) }
    }

    @Test func numbersRoundTripExactly() throws {
        var random = SplitMix64(seed: 5)
        for _ in 0..<5000 {
            let double = Double(bitPattern: random.next())
            if double.isNaN { continue }
            #expect(try AttributeText.parse(AttributeText.format(.double(double)), as: .double).get() == .double(double))
            let float = Float(bitPattern: UInt32(truncatingIfNeeded: random.next()))
            if float.isNaN { continue }
            #expect(try AttributeText.parse(AttributeText.format(.float(float)), as: .float).get() == .float(float))
        }
    }

    // MARK: - CSV

    @Test func csvFieldsRoundTrip() throws {
        var random = SplitMix64(seed: 3)
        let alphabet: [String] = ["a", "Z", " ", ",", "\"", "\n", "\r\n", "\r", "é", "🙂", "0", ""]
        for _ in 0..<500 {
            let records: [[String?]] = (0..<Int(random.next() % 4 + 1)).map { _ in
                (0..<3).map { _ -> String? in
                    if random.next() % 5 == 0 { return nil }
                    return (0..<Int(random.next() % 6)).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }.joined()
                }
            }
            var text = ""
            for record in records { CSVText.appendRecord(record, to: &text) }
            let parsed = try CSVText.parse(Array(text.utf8))
            let expected = records.filter { $0 != [nil] }
            #expect(parsed.map { $0.fields.map { $0.text.isEmpty && !$0.quoted ? nil : $0.text } } == expected, "\(text.debugDescription)")
        }
    }

    @Test func csvRecordsKnowTheirLines() throws {
        let records = try CSVText.parse(Array("a,b\r\n\"x\ny\",2\n\n3,4".utf8))
        #expect(records.map(\.line) == [1, 2, 5])
        #expect(records[1].fields == [CSVField(text: "x\ny", quoted: true), CSVField(text: "2", quoted: false)])
        #expect(records[2].fields.map(\.text) == ["3", "4"])
    }

    // MARK: - JSON

    @Test func jsonStringsAndNumbersAreExact() throws {
        let value = try JSONText.parse(Array(#"{"s": "a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude42", "n": [-0, 12345678901234567890, 1.5e-3, 0.1]}"#.utf8))
        guard case .string(let text)? = value["s"], case .array(let numbers)? = value["n"] else { Issue.record("\(value)"); return }
        #expect(text == "a\"\\/\u{8}\u{C}\n\r\té🙂")
        #expect(numbers.map { if case .number(let n) = $0 { n } else { "" } } == ["-0", "12345678901234567890", "1.5e-3", "0.1"])
        var output = ""
        JSONText.append(value, to: &output)
        let again = try JSONText.parse(Array(output.utf8))
        guard case .string(let reread)? = again["s"] else { Issue.record("\(output)"); return }
        #expect(reread == text)
    }

    /// Strings are taken from the bytes at once when they hold no escape, and ASCII skips the validating decoder:
    /// bytes that are not UTF-8 are still refused on every path, and UTF-8 beyond ASCII is still kept.
    @Test func textThatIsNotUTF8IsRefusedWhicheverWayItIsRead() throws {
        let badJSON: [[UInt8]] = [
            [0x5B, 0x22, 0x61, 0xFF, 0x22, 0x5D],              // ["a\xFF"]: no escape
            [0x5B, 0x22, 0x5C, 0x6E, 0xC3, 0x22, 0x5D],        // ["\n\xC3"]: after an escape, a sequence cut short
            [0x7B, 0x22, 0xC0, 0xAF, 0x22, 0x3A, 0x31, 0x7D],  // {"\xC0\xAF": 1}: an overlong name
        ]
        for bytes in badJSON {
            #expect { try JSONText.parse(bytes) } throws: { error in (error as? JSONSyntaxError)?.reason.contains("not valid UTF-8") == true }
        }
        guard case .array(let items) = try JSONText.parse(Array("[\"é🙂 plain\", \"tab\\té\"]".utf8)),
              case .string(let plain) = items[0], case .string(let escaped) = items[1] else { Issue.record("not two strings"); return }
        #expect(plain == "é🙂 plain" && escaped == "tab\té")

        #expect { try CSVText.parse([0x61, 0x2C, 0xFF, 0x0A]) } throws: { error in (error as? CSVSyntaxError)?.reason.contains("not valid UTF-8") == true }
        #expect { try CSVText.parse([0x22, 0xE2, 0x82, 0x22, 0x0A]) } throws: { error in (error as? CSVSyntaxError)?.reason.contains("not valid UTF-8") == true }
        #expect(try CSVText.parse(Array("é,\"ü,x\",plain\n".utf8)).first?.fields.map(\.text) == ["é", "ü,x", "plain"])
    }

    @Test(arguments: [
        ("{\"a\": 1, \"a\": 2}", "appears twice"), ("[01]", "expected ',' or ']'"), ("[1.]", "digits after '.'"), ("[-]", "needs digits"),
        ("[\"\\x\"]", "unknown escape"), ("[\"\\ud83d\"]", "surrogate"), ("[\"a\nb\"]", "control character"), ("[tru]", "expected true"),
        ("{\"a\" 1}", "expected ':'"), ("[1] [2]", "after the JSON value"), ("", "the text ends"), ("[1,", "the text ends"),
        (String(repeating: "[", count: 600), "nesting deeper"), ("{1: 2}", "member name"),
    ])
    func badJSONSaysWhy(text: String, reason: String) {
        #expect { try JSONText.parse(Array(text.utf8)) } throws: { error in
            (error as? JSONSyntaxError)?.reason.contains(reason) == true
        }
    }
}
