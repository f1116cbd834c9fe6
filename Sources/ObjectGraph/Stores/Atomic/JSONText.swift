import Foundation

/// A JSON value as the JSON store reads and writes it. Numbers keep their text, so 64-bit integers and decimals
/// are exact; objects keep their members' order and the line they start on, for error messages.
indirect enum JSONValue {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([(key: String, value: JSONValue)], line: Int)

    /// A member of an object, by key.
    subscript(key: String) -> JSONValue? {
        guard case .object(let members, _) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    /// What the value is, for messages.
    var kindName: String {
        switch self {
        case .null: "null"
        case .bool: "a Boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

/// Where and why a text is not JSON.
struct JSONSyntaxError: Error {
    let line: Int
    let column: Int
    let reason: String
}

/// A strict RFC 8259 parser and a writer with stable, readable output (two-space indents, one record per line).
package enum JSONText {
    static func parse(_ bytes: [UInt8]) throws(JSONSyntaxError) -> JSONValue {
        var parser = Parser(bytes: bytes)
        parser.skipSpace()
        let value = try parser.value(depth: 0)
        parser.skipSpace()
        guard parser.position == bytes.count else { throw parser.error("unexpected text after the JSON value") }
        return value
    }

    struct Parser {
        let bytes: [UInt8]
        var position = 0
        var line = 1
        var lineStart = 0

        init(bytes: [UInt8]) {
            self.bytes = bytes
            // A UTF-8 byte-order mark is allowed and ignored.
            if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { position = 3; lineStart = 3 }
        }

        func error(_ reason: String) -> JSONSyntaxError {
            JSONSyntaxError(line: line, column: position - lineStart + 1, reason: reason)
        }

        var current: UInt8? { position < bytes.count ? bytes[position] : nil }

        mutating func skipSpace() {
            while let byte = current {
                switch byte {
                case 0x20, 0x09, 0x0D: position += 1
                case 0x0A: position += 1; line += 1; lineStart = position
                default: return
                }
            }
        }

        mutating func value(depth: Int) throws(JSONSyntaxError) -> JSONValue {
            guard depth < 512 else { throw error("nesting deeper than 512 levels") }
            guard let byte = current else { throw error("the text ends where a value should be") }
            switch byte {
            case UInt8(ascii: "{"): return try object(depth: depth)
            case UInt8(ascii: "["): return try array(depth: depth)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try literal("true"); return .bool(true)
            case UInt8(ascii: "f"): try literal("false"); return .bool(false)
            case UInt8(ascii: "n"): try literal("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
            default: throw error("unexpected character \(describe(byte)) where a value should be")
            }
        }

        func describe(_ byte: UInt8) -> String {
            byte >= 0x20 && byte < 0x7F ? "'\(Character(Unicode.Scalar(byte)))'" : String(format: "0x%02X", byte)
        }

        mutating func literal(_ word: String) throws(JSONSyntaxError) {
            let expected = Array(word.utf8)
            guard bytes.count - position >= expected.count, Array(bytes[position..<position + expected.count]) == expected else {
                throw error("unexpected text where a value should be (expected \(word)?)")
            }
            position += expected.count
        }

        mutating func object(depth: Int) throws(JSONSyntaxError) -> JSONValue {
            let startLine = line
            position += 1
            var members: [(key: String, value: JSONValue)] = []
            var keys = Set<String>()
            skipSpace()
            if current == UInt8(ascii: "}") { position += 1; return .object([], line: startLine) }
            while true {
                skipSpace()
                guard current == UInt8(ascii: "\"") else { throw error("expected a member name in quotes") }
                let key = try string()
                guard keys.insert(key).inserted else { throw error("the member \"\(key)\" appears twice in one object") }
                skipSpace()
                guard current == UInt8(ascii: ":") else { throw error("expected ':' after the member name \"\(key)\"") }
                position += 1
                skipSpace()
                members.append((key, try value(depth: depth + 1)))
                skipSpace()
                switch current {
                case UInt8(ascii: ","): position += 1
                case UInt8(ascii: "}"): position += 1; return .object(members, line: startLine)
                case nil: throw error("the text ends inside the object that starts on line \(startLine) (a '}' is missing)")
                default: throw error("expected ',' or '}' in an object")
                }
            }
        }

        mutating func array(depth: Int) throws(JSONSyntaxError) -> JSONValue {
            let startLine = line
            position += 1
            var elements: [JSONValue] = []
            skipSpace()
            if current == UInt8(ascii: "]") { position += 1; return .array([]) }
            while true {
                skipSpace()
                elements.append(try value(depth: depth + 1))
                skipSpace()
                switch current {
                case UInt8(ascii: ","): position += 1
                case UInt8(ascii: "]"): position += 1; return .array(elements)
                case nil: throw error("the text ends inside the array that starts on line \(startLine) (a ']' is missing)")
                default: throw error("expected ',' or ']' in an array")
                }
            }
        }

        mutating func number() throws(JSONSyntaxError) -> String {
            let start = position
            func digits() -> Int {
                let from = position
                while let byte = current, byte >= 0x30 && byte <= 0x39 { position += 1 }
                return position - from
            }
            if current == UInt8(ascii: "-") { position += 1 }
            if current == UInt8(ascii: "0") {
                position += 1
            } else if digits() == 0 {
                throw error("a number needs digits")
            }
            if current == UInt8(ascii: ".") {
                position += 1
                guard digits() > 0 else { throw error("a number needs digits after '.'") }
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                position += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { position += 1 }
                guard digits() > 0 else { throw error("a number needs digits in its exponent") }
            }
            return String(decoding: bytes[start..<position], as: UTF8.self)
        }

        mutating func string() throws(JSONSyntaxError) -> String {
            position += 1
            // Most strings hold no escape: their bytes up to the closing quote are the text, taken at once.
            let start = position
            while position < bytes.count {
                let byte = bytes[position]
                if byte == UInt8(ascii: "\"") {
                    position += 1
                    guard let text = UTF8Text.string(bytes[start..<position - 1]) else { throw error("a string is not valid UTF-8") }
                    return text
                }
                if byte == UInt8(ascii: "\\") || byte < 0x20 { break }
                position += 1
            }
            var scalars = Array(bytes[start..<position])
            while true {
                guard let byte = current else { throw error("a string is not closed") }
                switch byte {
                case UInt8(ascii: "\""):
                    position += 1
                    guard let text = UTF8Text.string(scalars[...]) else { throw error("a string is not valid UTF-8") }
                    return text
                case UInt8(ascii: "\\"):
                    position += 1
                    guard let escape = current else { throw error("a string is not closed") }
                    position += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scalars.append(escape)
                    case UInt8(ascii: "b"): scalars.append(0x08)
                    case UInt8(ascii: "f"): scalars.append(0x0C)
                    case UInt8(ascii: "n"): scalars.append(0x0A)
                    case UInt8(ascii: "r"): scalars.append(0x0D)
                    case UInt8(ascii: "t"): scalars.append(0x09)
                    case UInt8(ascii: "u"):
                        var code = try hex4()
                        if (0xD800..<0xDC00).contains(code) {
                            guard current == UInt8(ascii: "\\"), position + 1 < bytes.count, bytes[position + 1] == UInt8(ascii: "u") else {
                                throw error("a \\u escape holds half of a surrogate pair")
                            }
                            position += 2
                            let low = try hex4()
                            guard (0xDC00..<0xE000).contains(low) else { throw error("a \\u escape holds half of a surrogate pair") }
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00..<0xE000).contains(code) {
                            throw error("a \\u escape holds half of a surrogate pair")
                        }
                        scalars.append(contentsOf: Array(String(Character(Unicode.Scalar(code)!)).utf8))
                    default: throw error("unknown escape \\\(Character(Unicode.Scalar(escape)))")
                    }
                case 0x00..<0x20:
                    throw error("a control character (\(describe(byte))) inside a string must be escaped")
                default:
                    scalars.append(byte)
                    position += 1
                }
            }
        }

        mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
            guard bytes.count - position >= 4 else { throw error("a \\u escape needs four hex digits") }
            var code: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[position]
                let digit: UInt32
                switch byte {
                case 0x30...0x39: digit = UInt32(byte - 0x30)
                case 0x41...0x46: digit = UInt32(byte - 0x41 + 10)
                case 0x61...0x66: digit = UInt32(byte - 0x61 + 10)
                default: throw error("a \\u escape needs four hex digits")
                }
                code = code << 4 | digit
                position += 1
            }
            return code
        }
    }

    // MARK: - Writing

    /// Appends `text` as a JSON string.
    package static func appendString(_ text: String, to output: inout String) {
        output.append("\"")
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": output.append("\\\"")
            case "\\": output.append("\\\\")
            case "\n": output.append("\\n")
            case "\r": output.append("\\r")
            case "\t": output.append("\\t")
            case "\u{0}"..."\u{1F}", "\u{7F}", "\u{2028}", "\u{2029}":
                output.append("\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16))
            default: output.unicodeScalars.append(scalar)
            }
        }
        output.append("\"")
    }

    /// Appends an object of strings, keys sorted, one member per line at `indent` (the closing brace one level
    /// less): how the stores write their metadata.
    static func appendStringObject(_ members: [String: String], indent: String, to output: inout String) {
        output.append("{")
        for (index, (key, value)) in members.sorted(by: { $0.key < $1.key }).enumerated() {
            output.append(index == 0 ? "\n" + indent : ",\n" + indent)
            appendString(key, to: &output)
            output.append(": ")
            appendString(value, to: &output)
        }
        output.append("\n" + indent.dropLast(2) + "}")
    }

    /// Appends a value on one line.
    static func append(_ value: JSONValue, to output: inout String) {
        switch value {
        case .null: output.append("null")
        case .bool(let value): output.append(value ? "true" : "false")
        case .number(let text): output.append(text)
        case .string(let text): appendString(text, to: &output)
        case .array(let elements):
            output.append("[")
            for (index, element) in elements.enumerated() {
                if index > 0 { output.append(", ") }
                append(element, to: &output)
            }
            output.append("]")
        case .object(let members, _):
            output.append("{")
            for (index, member) in members.enumerated() {
                if index > 0 { output.append(", ") }
                appendString(member.key, to: &output)
                output.append(": ")
                append(member.value, to: &output)
            }
            output.append("}")
        }
    }
}
