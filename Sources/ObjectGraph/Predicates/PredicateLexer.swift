/// A token of the predicate format language.
struct PredicateToken: Equatable {
    enum Kind: Equatable {
        case identifier(String)          // a C identifier or #-escaped one; keywords are identifiers matched case-insensitively
        case escapedIdentifier(String)   // #name: never a keyword
        case atIdentifier(String)        // @count, @sum, …
        case variable(String)            // $NAME
        case string(String)
        case integer(Int64)
        case double(Double)
        case formatSpecifier(String)     // "@", "K", "d", "ld", "f", …
        case symbol(String)              // operators and punctuation
        case end
    }

    var kind: Kind
    /// Offset of the token's first character, in Unicode scalars from the start of the text.
    var offset: Int

    /// How the token is shown in an error message.
    var display: String {
        switch kind {
        case .identifier(let name): "\"\(name)\""
        case .escapedIdentifier(let name): "\"#\(name)\""
        case .atIdentifier(let name): "\"@\(name)\""
        case .variable(let name): "\"$\(name)\""
        case .string(let text): "the string \"\(text)\""
        case .integer(let value): "the number \(value)"
        case .double(let value): "the number \(value)"
        case .formatSpecifier(let spec): "\"%\(spec)\""
        case .symbol(let symbol): "\"\(symbol)\""
        case .end: "the end of the text"
        }
    }

    /// Whether this is the keyword `word` (upper-case; matched case-insensitively). ASCII names are compared byte by
    /// byte with a–z folded, without making an upper-case copy; others as their `uppercased()`.
    func isKeyword(_ word: String) -> Bool {
        guard case .identifier(var name) = kind else { return false }
        return name.withUTF8 { bytes in
            guard bytes.allSatisfy({ $0 < 0x80 }) else { return nil }
            return bytes.elementsEqual(word.utf8) { $0 &- UInt8(ascii: "a") < 26 ? $0 &- 0x20 == $1 : $0 == $1 }
        } ?? (name.uppercased() == word)
    }

    func isSymbol(_ symbol: String) -> Bool {
        if case .symbol(let value) = kind { return value == symbol }
        return false
    }
}

/// Splits predicate text into tokens. Throws ``PredicateSyntaxError`` for characters and literals it cannot read.
struct PredicateLexer {
    /// The text's Unicode scalars — empty when the text is ASCII (what format strings almost always are): ``codes``
    /// are then the text.
    ///
    /// The lexer reads scalars, not grapheme clusters: a combining mark after `(` or a quote is the start of the
    /// name or string that follows, as it is where the predicate was printed — read as clusters, `(` and the mark
    /// would be one character that starts no token.
    private let scalars: [Unicode.Scalar]
    /// Each scalar's ASCII code, or 0xFF for any other scalar: most scalars are classified by it, where asking for
    /// a scalar's Unicode properties (alphabetic, white space) costs a table search each.
    private let codes: [UInt8]
    private let text: String
    private var position = 0

    init(_ text: String) {
        self.text = text
        let bytes = Array(text.utf8)
        if bytes.allSatisfy({ $0 < 0x80 }) {
            scalars = []
            codes = bytes
        } else {
            scalars = Array(text.unicodeScalars)
            codes = scalars.map { $0.isASCII ? UInt8($0.value) : 0xFF }
        }
    }

    /// The scalar at `index`, as a character.
    private func character(_ index: Int) -> Character {
        Character(scalars.isEmpty ? Unicode.Scalar(codes[index]) : scalars[index])
    }

    /// The scalars of `range`, as a string.
    private func string(_ range: Range<Int>) -> String {
        if scalars.isEmpty { return String(decoding: codes[range], as: UTF8.self) }
        var string = ""
        string.unicodeScalars.append(contentsOf: scalars[range])
        return string
    }

    static func tokenize(_ text: String) throws(PredicateSyntaxError) -> [PredicateToken] {
        var lexer = PredicateLexer(text)
        var tokens: [PredicateToken] = []
        while true {
            let token = try lexer.next()
            tokens.append(token)
            if token.kind == .end { return tokens }
        }
    }

    private func error(_ message: String, at offset: Int, found: String) -> PredicateSyntaxError {
        PredicateSyntaxError(text: text, offset: offset, found: found, message: message)
    }

    private func peek(_ ahead: Int = 0) -> Character? {
        position + ahead < codes.count ? character(position + ahead) : nil
    }

    private mutating func next() throws(PredicateSyntaxError) -> PredicateToken {
        while isWhitespace(at: position) { position += 1 }
        let start = position
        guard let c = peek() else { return PredicateToken(kind: .end, offset: start) }

        if c == "\"" || c == "'" { return PredicateToken(kind: .string(try readString(quote: c)), offset: start) }
        if isDigit(at: position) { return PredicateToken(kind: try readNumber(), offset: start) }
        if c == "." , isDigit(at: position + 1) { return PredicateToken(kind: try readNumber(), offset: start) }
        if isIdentifierStart(at: position) {
            let name = readIdentifier()
            // UTI-CONFORMS-TO and UTI-EQUALS contain hyphens.
            if peek() == "-", name.uppercased() == "UTI" {
                for suffix in ["-CONFORMS-TO", "-EQUALS"] where matchesAhead(suffix, ignoringCase: true) {
                    position += suffix.count
                    return PredicateToken(kind: .identifier("UTI" + suffix), offset: start)
                }
            }
            return PredicateToken(kind: .identifier(name), offset: start)
        }
        switch c {
        case "#":
            position += 1
            guard isIdentifierStart(at: position) else { throw error("expected an identifier after \"#\"", at: start, found: "\"#\"") }
            return PredicateToken(kind: .escapedIdentifier(readIdentifier()), offset: start)
        case "@":
            position += 1
            guard isIdentifierStart(at: position) else { throw error("expected a key name after \"@\"", at: start, found: "\"@\"") }
            return PredicateToken(kind: .atIdentifier(readIdentifier()), offset: start)
        case "$":
            position += 1
            guard isIdentifierStart(at: position) else { throw error("expected a variable name after \"$\"", at: start, found: "\"$\"") }
            return PredicateToken(kind: .variable(readIdentifier()), offset: start)
        case "%":
            return PredicateToken(kind: .formatSpecifier(try readFormatSpecifier()), offset: start)
        default:
            break
        }
        for symbol in Self.symbols where matchesAhead(symbol) {
            position += symbol.count
            return PredicateToken(kind: .symbol(symbol), offset: start)
        }
        throw error("this character cannot start a token", at: start, found: "\"\(c)\"")
    }

    /// Longest first, so `<=` wins over `<`.
    private static let symbols = [
        ":=", "==", "!=", "<>", "<=", "=<", ">=", "=>", "&&", "||", "**", "<<", ">>",
        "=", "<", ">", "!", "(", ")", "{", "}", "[", "]", ",", ".", "+", "-", "*", "/", "&", "|", "^",
    ]

    /// Whether the text at the current position spells `literal` (in any case with `ignoringCase`).
    private func matchesAhead(_ literal: String, ignoringCase: Bool = false) -> Bool {
        if !ignoringCase {
            // The symbols are ASCII: compared by code.
            var index = position
            for byte in literal.utf8 {
                guard index < codes.count, codes[index] == byte else { return false }
                index += 1
            }
            return true
        }
        var index = position
        for expected in literal {
            guard index < codes.count else { return false }
            let actual = character(index)
            guard actual == expected || ignoringCase && actual.uppercased() == expected.uppercased() else { return false }
            index += 1
        }
        return true
    }

    // Scalar classes by position: ASCII by its code (``codes``), anything else by its Unicode properties.

    /// A letter or `_`.
    private func isIdentifierStart(at index: Int) -> Bool {
        guard index < codes.count else { return false }
        let code = codes[index]
        guard code != 0xFF else { return scalars[index].properties.isAlphabetic }
        return code == UInt8(ascii: "_") || (code | 0x20) &- UInt8(ascii: "a") < 26
    }

    /// A letter, a digit, a combining mark (the accent of a decomposed `é`) or `_`.
    private func isIdentifierPart(at index: Int) -> Bool {
        guard index < codes.count else { return false }
        let code = codes[index]
        guard code != 0xFF else {
            let properties = scalars[index].properties
            switch properties.generalCategory {
            case .nonspacingMark, .spacingMark, .enclosingMark: return true
            default: return properties.isAlphabetic || properties.numericType != nil
            }
        }
        return code == UInt8(ascii: "_") || (code | 0x20) &- UInt8(ascii: "a") < 26 || code &- UInt8(ascii: "0") < 10
    }

    /// `0`–`9` (only ASCII digits start or continue a number literal).
    private func isDigit(at index: Int) -> Bool {
        index < codes.count && codes[index] &- UInt8(ascii: "0") < 10
    }

    private func isWhitespace(at index: Int) -> Bool {
        guard index < codes.count else { return false }
        let code = codes[index]
        guard code != 0xFF else { return scalars[index].properties.isWhitespace }
        return code == UInt8(ascii: " ") || code &- 0x09 < 5
    }

    private mutating func readIdentifier() -> String {
        let start = position
        while isIdentifierPart(at: position) { position += 1 }
        // An ASCII name is its codes.
        if !codes[start..<position].contains(0xFF) { return String(decoding: codes[start..<position], as: UTF8.self) }
        return string(start..<position)
    }

    private mutating func readFormatSpecifier() throws(PredicateSyntaxError) -> String {
        let start = position
        position += 1
        var spec = ""
        // Length modifiers, then the conversion character.
        while let c = peek(), Self.lengthModifiers.contains(c) { spec.append(c); position += 1 }
        guard let c = peek() else { throw error("a format specifier is cut off", at: start, found: "\"%\"") }
        position += 1
        spec.append(c)
        guard Self.formatSpecifiers.contains(spec) else {
            throw error("\"%\(spec)\" is not a format specifier (use %@, %K, %d, %i, %ld, %lld, %u, %f, %lf or %s; %K is upper-case)",
                        at: start, found: "\"%\(spec)\"")
        }
        return spec
    }

    private static let lengthModifiers: Set<Character> = ["l", "h", "q", "L", "j", "z", "t"]
    private static let formatSpecifiers: Set<String> = [
        "@", "K", "d", "i", "u", "x", "X", "o", "ld", "li", "lu", "lx", "lld", "lli", "llu", "llx",
        "hd", "hi", "hu", "qd", "qi", "qu", "zd", "zu", "f", "lf", "Lf", "e", "g", "s", "c",
    ]

    private mutating func readNumber() throws(PredicateSyntaxError) -> PredicateToken.Kind {
        let start = position
        if peek() == "0", let radixMark = peek(1)?.lowercased(), ["x", "o", "b"].contains(radixMark) {
            position += 2
            let radix = radixMark == "x" ? 16 : radixMark == "o" ? 8 : 2
            let digitsStart = position
            while let c = peek(), c.isHexDigit || c == "_" { position += 1 }
            let digits = string(digitsStart..<position).replacingOccurrences(of: "_", with: "")
            guard let value = Int64(digits, radix: radix) else {
                throw error("\"\(string(start..<position))\" is not a valid base-\(radix) number", at: start,
                            found: "\"\(string(start..<position))\"")
            }
            return .integer(value)
        }
        var isFloat = false
        while isDigit(at: position) { position += 1 }
        if peek() == ".", isDigit(at: position + 1) {
            isFloat = true
            position += 1
            while isDigit(at: position) { position += 1 }
        } else if peek() == ".", position == start {
            position += 1
            isFloat = true
            while isDigit(at: position) { position += 1 }
        }
        if let e = peek(), e == "e" || e == "E" {
            let sign = peek(1) == "+" || peek(1) == "-" ? 1 : 0
            if isDigit(at: position + 1 + sign) {
                isFloat = true
                position += 1 + sign
                while isDigit(at: position) { position += 1 }
            }
        }
        let literal = string(start..<position)
        if let c = peek(), isIdentifierStart(at: position) {
            throw error("a number runs into letters", at: start, found: "\"\(literal)\(c)\"")
        }
        if !isFloat, let value = Int64(literal) { return .integer(value) }
        guard let value = Double(literal) else { throw error("\"\(literal)\" is not a number", at: start, found: "\"\(literal)\"") }
        return .double(value)
    }

    private mutating func readString(quote: Character) throws(PredicateSyntaxError) -> String {
        let start = position
        position += 1
        var result = ""
        while true {
            guard let c = peek() else { throw error("the string is not closed", at: start, found: "an unterminated string") }
            position += 1
            if c == quote { return result }
            guard c == "\\" else { result.append(c); continue }
            guard let escaped = peek() else { throw error("the string ends in a lone backslash", at: start, found: "an unterminated string") }
            position += 1
            switch escaped {
            case "n": result.append("\n")
            case "t": result.append("\t")
            case "r": result.append("\r")
            case "0" where !(peek()?.isNumber ?? false): result.append("\0")
            case "x", "X": result.append(try readEscapedScalar(hexDigits: 2, at: position - 2))
            case "u", "U": result.append(try readEscapedScalar(hexDigits: 4, at: position - 2))
            case let d where ("0"..."7").contains(d):
                var digits = String(d)
                while digits.count < 3, let next = peek(), ("0"..."7").contains(next) { digits.append(next); position += 1 }
                guard let value = UInt32(digits, radix: 8), let scalar = Unicode.Scalar(value) else {
                    throw error("\"\\\(digits)\" is not a valid octal escape", at: position - digits.count - 1, found: "\"\\\(digits)\"")
                }
                result.unicodeScalars.append(scalar)
            default: result.append(escaped)  // \" \' \\ and any other character stand for themselves
            }
        }
    }

    private mutating func readEscapedScalar(hexDigits: Int, at offset: Int) throws(PredicateSyntaxError) -> Character {
        var digits = ""
        while digits.count < hexDigits, let c = peek(), c.isHexDigit { digits.append(c); position += 1 }
        guard digits.count == hexDigits, let value = UInt32(digits, radix: 16), let scalar = Unicode.Scalar(value) else {
            throw error("an escape needs \(hexDigits) hexadecimal digits", at: offset, found: "\"\\\(string(offset + 1..<position))\"")
        }
        return Character(scalar)
    }
}

/// A predicate that could not be parsed: where, what was found there, and what was expected.
public struct PredicateSyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The text that was parsed.
    public let text: String
    /// The offset of the problem, in Unicode scalars from the start of the text (characters, for text without
    /// combining marks).
    public let offset: Int
    /// The line of the problem, counting from 1.
    public let line: Int
    /// The column of the problem, counting from 1.
    public let column: Int
    /// What was found there (a token, or "the end of the text").
    public let found: String
    /// What was wrong or expected.
    public let message: String

    init(text: String, offset: Int, found: String, message: String) {
        self.text = text
        self.offset = offset
        self.found = found
        self.message = message
        var line = 1, column = 1
        for scalar in text.unicodeScalars.prefix(offset) {
            if scalar == "\n" { line += 1; column = 1 } else { column += 1 }
        }
        self.line = line
        self.column = column
    }

    /// "at offset 12 (line 1, column 13), found "foo": expected …".
    public var description: String {
        "cannot parse the predicate at offset \(offset) (line \(line), column \(column)), found \(found): \(message)"
    }
}
