import Foundation

/// Attribute values as the text the JSON and CSV stores write: readable by other programs, and exact — every value
/// reads back as the value that was written.
///
/// | Type | Text |
/// |---|---|
/// | integers | decimal digits |
/// | double, float | the shortest decimal that reads back as the same number; `Infinity`, `-Infinity` (never NaN) |
/// | decimal | its decimal digits |
/// | boolean | `true` / `false` |
/// | date | ISO 8601 in UTC with as many fraction digits as the value needs: `2024-03-01T12:00:00.25Z` |
/// | binary data, transformable | base64 |
/// | UUID | `E621E1F8-C36C-495A-93FC-0C247A3E6E5F` |
/// | URI, object ID | the URI |
package enum AttributeText {
    /// The value as text.
    static func format(_ value: AttributeValue) -> String {
        switch value {
        case .integer(let value): String(value)
        case .double(let value): format(double: value)
        case .float(let value): value.isInfinite ? format(double: Double(value)) : String(value)
        case .decimal(let value): "\(value)"
        case .string(let value): value
        case .boolean(let value): value ? "true" : "false"
        case .date(let value): format(date: value)
        case .data(let value): value.base64EncodedString()
        case .uuid(let value): value.uuidString
        case .uri(let value): value.absoluteString
        }
    }

    package static func format(double value: Double) -> String {
        value.isInfinite ? (value < 0 ? "-Infinity" : "Infinity") : String(value)
    }

    /// Whether the value is written as a JSON number or Boolean rather than a string.
    static func isJSONScalar(_ value: AttributeValue) -> Bool {
        switch value {
        case .integer, .boolean: true
        case .double(let value): value.isFinite
        case .float(let value): value.isFinite
        default: false
        }
    }

    /// The value of `type` that `text` stands for, or a sentence saying why it stands for none.
    static func parse(_ text: String, as type: AttributeType) -> Result<AttributeValue, Problem> {
        func fail(_ expected: String) -> Result<AttributeValue, Problem> {
            .failure(Problem(reason: "\"\(text.prefix(60))\" is not \(expected)"))
        }
        switch type {
        case .integer16, .integer32, .integer64:
            guard let value = Int64(text) else { return fail("an integer") }
            guard type.integerRange!.contains(value) else {
                return .failure(Problem(reason: "\(value) does not fit a \(type.coreDataName) attribute"))
            }
            return .success(.integer(value))
        case .double:
            guard let value = parseDouble(text) else { return fail("a number") }
            return .success(.double(value))
        case .float:
            guard let value = parseDouble(text) else { return fail("a number") }
            // Parse the text itself, so the float is the one nearest the decimal (not a rounded double).
            guard let float = value.isFinite ? Float(text) : Float(value), float.isFinite == value.isFinite else { return fail("a 32-bit floating-point number") }
            return .success(.float(float))
        case .decimal:
            guard !text.isEmpty, text.allSatisfy({ "0123456789.-+eE".contains($0) }), let value = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")) else {
                return fail("a decimal number")
            }
            return .success(.decimal(value))
        case .string:
            return .success(.string(text))
        case .boolean:
            switch text {
            case "true": return .success(.boolean(true))
            case "false": return .success(.boolean(false))
            default: return fail("true or false")
            }
        case .date:
            guard let date = parseDate(text) else { return fail("an ISO 8601 date (2024-03-01T12:00:00Z)") }
            return .success(.date(date))
        case .binaryData, .transformable:
            guard let data = Data(base64Encoded: text) else { return fail("base64") }
            return .success(.data(data))
        case .uuid:
            guard let uuid = UUID(uuidString: text) else { return fail("a UUID") }
            return .success(.uuid(uuid))
        case .uri, .objectID:
            guard !text.isEmpty, let url = URL(string: text) else { return fail("a URI") }
            return .success(.uri(url))
        case .undefined:
            return .failure(Problem(reason: "an attribute of undefined type cannot be stored"))
        }
    }

    /// Why a text is not a value of a type.
    struct Problem: Error {
        let reason: String
    }

    private static func parseDouble(_ text: String) -> Double? {
        switch text {
        case "Infinity": return .infinity
        case "-Infinity": return -.infinity
        default:
            // Swift's parser also takes "nan", "inf" and hexadecimal; the file format does not. The checks read the
            // UTF-8 bytes, not characters (a CSV import checks every number): a text that starts with a digit, sign
            // or point and holds no ASCII letter but e or E is left to the parser, which refuses any other byte.
            let utf8 = text.utf8
            guard let first = utf8.first, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) || first == UInt8(ascii: "-")
                    || first == UInt8(ascii: ".") || first == UInt8(ascii: "+"),
                  !utf8.contains(where: { byte in
                      let lower = byte | 0x20
                      return lower >= UInt8(ascii: "a") && lower <= UInt8(ascii: "z") && lower != UInt8(ascii: "e")
                  }) else { return nil }
            return Double(text)
        }
    }

    // MARK: - Dates

    /// ISO 8601 in UTC. The whole seconds come from the calendar; the fraction is the shortest decimal that reads
    /// back as the same `Double`, so `parseDate(format(date: d)) == d` for every date.
    package static func format(date: Date) -> String {
        // Work from the reference date, which is what a Date holds, so no rounding happens on the way.
        let interval = date.timeIntervalSinceReferenceDate
        guard interval.isFinite, abs(interval) < 1e15 else { return String(interval) }
        let seconds = interval.rounded(.down)
        let fraction = interval - seconds  // exact (Sterbenz)
        let (year, month, day, hour, minute, second) = civil(Int64(seconds) + referenceDateOffset)
        func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
        var text = year >= 0 && year <= 9999 ? String(repeating: "0", count: 4 - String(year).count) + String(year)
            : (year < 0 ? "-" : "+") + String(abs(year))
        text += "-\(two(month))-\(two(day))T\(two(hour)):\(two(minute)):\(two(second))"
        if fraction != 0 {
            text += "." + fractionDigits(fraction)
        }
        return text + "Z"
    }

    /// The digits after "0." of the shortest decimal that reads back as `fraction` (0 < fraction < 1).
    private static func fractionDigits(_ fraction: Double) -> String {
        let shortest = String(fraction)  // "0.25" or "1.5e-07"
        if let exponentIndex = shortest.firstIndex(where: { $0 == "e" || $0 == "E" }) {
            let mantissa = shortest[..<exponentIndex].replacingOccurrences(of: ".", with: "")
            let exponent = Int(shortest[shortest.index(after: exponentIndex)...])!
            return String(repeating: "0", count: -exponent - 1) + mantissa
        }
        return String(shortest.dropFirst(2))
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; a date alone (`YYYY-MM-DD`) is midnight UTC.
    static func parseDate(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        var position = 0
        func number(_ digits: Int) -> Int64? {
            guard position + digits <= bytes.count else { return nil }
            var value: Int64 = 0
            for byte in bytes[position..<position + digits] {
                guard byte >= 48 && byte <= 57 else { return nil }
                value = value * 10 + Int64(byte - 48)
            }
            position += digits
            return value
        }
        func expect(_ character: UInt8) -> Bool {
            guard position < bytes.count, bytes[position] == character else { return false }
            position += 1
            return true
        }
        var sign: Int64 = 1
        if expect(UInt8(ascii: "-")) { sign = -1 } else { _ = expect(UInt8(ascii: "+")) }
        guard let year = number(4), expect(UInt8(ascii: "-")), let month = number(2), expect(UInt8(ascii: "-")), let day = number(2),
              (1...12).contains(month), (1...daysIn(month: month, year: sign * year)).contains(day) else { return nil }
        var seconds = days(fromYear: sign * year, month: month, day: day) * 86_400
        if position == bytes.count { return Date(timeIntervalSinceReferenceDate: Double(seconds - referenceDateOffset)) }
        guard expect(UInt8(ascii: "T")), let hour = number(2), expect(UInt8(ascii: ":")), let minute = number(2), expect(UInt8(ascii: ":")),
              let second = number(2), hour < 24, minute < 60, second < 61 else { return nil }
        seconds += hour * 3600 + minute * 60 + second
        var fraction = 0.0
        if expect(UInt8(ascii: ".")) {
            let start = position
            while position < bytes.count, bytes[position] >= 48 && bytes[position] <= 57 { position += 1 }
            guard position > start, let value = Double("0." + String(decoding: bytes[start..<position], as: UTF8.self)) else { return nil }
            fraction = value
        }
        if expect(UInt8(ascii: "Z")) {
            // UTC
        } else if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") {
            let offsetSign: Int64 = bytes[position] == UInt8(ascii: "-") ? -1 : 1
            position += 1
            guard let hours = number(2), expect(UInt8(ascii: ":")), let minutes = number(2), hours < 24, minutes < 60 else { return nil }
            seconds -= offsetSign * (hours * 3600 + minutes * 60)
        } else {
            return nil
        }
        guard position == bytes.count else { return nil }
        return Date(timeIntervalSinceReferenceDate: Double(seconds - referenceDateOffset) + fraction)
    }

    /// Seconds from 1970-01-01 to 2001-01-01.
    private static let referenceDateOffset: Int64 = 978_307_200

    private static func isLeap(_ year: Int64) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar.
    static func days(fromYear year: Int64, month: Int64, day: Int64) -> Int64 {
        // Count from March, so the leap day ends a year; eras are 400-year cycles of 146 097 days.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let monthFromMarch = (month + 9) % 12
        let dayOfYear = (153 * monthFromMarch + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The calendar date and time of a count of seconds since 1970-01-01 UTC.
    static func civil(_ seconds: Int64) -> (year: Int64, month: Int64, day: Int64, hour: Int64, minute: Int64, second: Int64) {
        let dayNumber = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - dayNumber * 86_400
        let z = dayNumber + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return (year, month, day, secondOfDay / 3600, secondOfDay % 3600 / 60, secondOfDay % 60)
    }
}
