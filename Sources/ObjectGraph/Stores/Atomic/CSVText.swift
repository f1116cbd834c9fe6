import Foundation

/// One field of a CSV record: its text, and whether it was quoted (an empty quoted field is an empty string; an
/// empty unquoted one is NULL).
struct CSVField: Equatable {
    var text: String
    var quoted: Bool
}

/// One CSV record and the line it starts on.
struct CSVRecord {
    var fields: [CSVField]
    var line: Int
}

/// Where and why a text is not CSV.
struct CSVSyntaxError: Error {
    let line: Int
    let reason: String
}

/// RFC 4180 CSV: comma-separated fields, records ended by CRLF (LF alone is read too), fields quoted with `"` when
/// they hold a comma, a quote or a line break, quotes doubled inside them.
enum CSVText {
    static func parse(_ bytes: [UInt8]) throws(CSVSyntaxError) -> [CSVRecord] {
        try parse(bytes[...], firstLine: 1).records
    }

    /// The records of `bytes`, whose first line is line `firstLine` of a longer text, and the line after them.
    static func parse(_ bytes: ArraySlice<UInt8>, firstLine: Int) throws(CSVSyntaxError) -> (records: [CSVRecord], nextLine: Int) {
        var records: [CSVRecord] = []
        var fields: [CSVField] = []
        var field: [UInt8] = []
        var quoted = false
        var line = firstLine, recordLine = firstLine
        var position = bytes.startIndex + (firstLine == 1 && bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0)
        func text(_ bytes: [UInt8]) throws(CSVSyntaxError) -> String {
            guard let text = UTF8Text.string(bytes[...]) else { throw CSVSyntaxError(line: line, reason: "a field is not valid UTF-8") }
            return text
        }
        func endRecord() throws(CSVSyntaxError) {
            fields.append(CSVField(text: try text(field), quoted: quoted))
            // A blank line (one empty unquoted field) is no record.
            if !(fields.count == 1 && fields[0] == CSVField(text: "", quoted: false)) {
                records.append(CSVRecord(fields: fields, line: recordLine))
            }
            fields.removeAll(keepingCapacity: true)
            field.removeAll(keepingCapacity: true)
            quoted = false
        }
        while position < bytes.endIndex {
            let byte = bytes[position]
            switch byte {
            case UInt8(ascii: "\""):
                guard field.isEmpty && !quoted else {
                    throw CSVSyntaxError(line: line, reason: "a quote inside an unquoted field (quote the whole field and double the quote)")
                }
                quoted = true
                position += 1
                while true {
                    guard position < bytes.endIndex else { throw CSVSyntaxError(line: recordLine, reason: "a quoted field is not closed") }
                    let inner = bytes[position]
                    position += 1
                    if inner == UInt8(ascii: "\"") {
                        if position < bytes.endIndex && bytes[position] == UInt8(ascii: "\"") {
                            field.append(inner)
                            position += 1
                        } else {
                            break
                        }
                    } else {
                        if inner == 0x0A { line += 1 }
                        field.append(inner)
                    }
                }
                if position < bytes.endIndex, ![UInt8(ascii: ","), 0x0A, 0x0D].contains(bytes[position]) {
                    throw CSVSyntaxError(line: line, reason: "text after a closing quote (a quote inside a field must be doubled)")
                }
            case UInt8(ascii: ","):
                fields.append(CSVField(text: try text(field), quoted: quoted))
                field.removeAll(keepingCapacity: true)
                quoted = false
                position += 1
            case 0x0D, 0x0A:
                try endRecord()
                position += (byte == 0x0D && position + 1 < bytes.endIndex && bytes[position + 1] == 0x0A) ? 2 : 1
                line += 1
                recordLine = line
            default:
                if quoted { throw CSVSyntaxError(line: line, reason: "text after a closing quote (a quote inside a field must be doubled)") }
                // The run of plain bytes up to the next delimiter, copied at once.
                var end = position + 1
                while end < bytes.endIndex {
                    let next = bytes[end]
                    if next == UInt8(ascii: ",") || next == 0x0A || next == 0x0D || next == UInt8(ascii: "\"") { break }
                    end += 1
                }
                field.append(contentsOf: bytes[position..<end])
                position = end
            }
        }
        if !field.isEmpty || quoted || !fields.isEmpty { try endRecord() }
        return (records, line)
    }

    /// Appends one record, ended by CRLF. `nil` is NULL (an empty field); an empty string is written as `""`.
    static func appendRecord(_ fields: [String?], to output: inout String) {
        for (index, field) in fields.enumerated() {
            if index > 0 { output.append(",") }
            guard let field else { continue }
            if field.isEmpty || field.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" || $0 == "\r\n" })
                || field.first == " " || field.last == " " {
                output.append("\"")
                output.append(field.replacingOccurrences(of: "\"", with: "\"\""))
                output.append("\"")
            } else {
                output.append(field)
            }
        }
        output.append("\r\n")
    }
}
