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
    /// Offset of the token's first character, in characters from the start of the text.
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

    /// Whether this is the keyword `word` (case-insensitive).
    func isKeyword(_ word: String) -> Bool {
        if case .identifier(let name) = kind { return name.uppercased() == word }
        return false
    }

    func isSymbol(_ symbol: String) -> Bool {
        if case .symbol(let value) = kind { return value == symbol }
        return false
    }
}

/// Splits predicate text into tokens. Throws ``PredicateSyntaxError`` for characters and literals it cannot read.
struct PredicateLexer {
    private let characters: [Character]
    private let text: String
    private var position = 0

    init(_ text: String) {
        self.text = text
        self.characters = Array(text)
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
        position + ahead < characters.count ? characters[position + ahead] : nil
    }

    private mutating func next() throws(PredicateSyntaxError) -> PredicateToken {
        while let c = peek(), c.isWhitespace { position += 1 }
        let start = position
        guard let c = peek() else { return PredicateToken(kind: .end, offset: start) }

        if c == "\"" || c == "'" { return PredicateToken(kind: .string(try readString(quote: c)), offset: start) }
        if c.isASCII && c.isNumber { return PredicateToken(kind: try readNumber(), offset: start) }
        if c == "." , let d = peek(1), d.isASCII && d.isNumber { return PredicateToken(kind: try readNumber(), offset: start) }
        if isIdentifierStart(c) {
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
            guard let d = peek(), isIdentifierStart(d) else { throw error("expected an identifier after \"#\"", at: start, found: "\"#\"") }
            return PredicateToken(kind: .escapedIdentifier(readIdentifier()), offset: start)
        case "@":
            position += 1
            guard let d = peek(), isIdentifierStart(d) else { throw error("expected a key name after \"@\"", at: start, found: "\"@\"") }
            return PredicateToken(kind: .atIdentifier(readIdentifier()), offset: start)
        case "$":
            position += 1
            guard let d = peek(), isIdentifierStart(d) else { throw error("expected a variable name after \"$\"", at: start, found: "\"$\"") }
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
        var index = position
        for expected in literal {
            guard index < characters.count else { return false }
            let actual = characters[index]
            guard actual == expected || ignoringCase && actual.uppercased() == expected.uppercased() else { return false }
            index += 1
        }
        return true
    }

    private func isIdentifierStart(_ c: Character) -> Bool { c == "_" || c.isLetter }
    private func isIdentifierPart(_ c: Character) -> Bool { c == "_" || c.isLetter || c.isNumber }

    private mutating func readIdentifier() -> String {
        let start = position
        while let c = peek(), isIdentifierPart(c) { position += 1 }
        return String(characters[start..<position])
    }

    private mutating func readFormatSpecifier() throws(PredicateSyntaxError) -> String {
        let start = position
        position += 1
        var spec = ""
        // Length modifiers, then the conversion character.
        while let c = peek(), "lhqLjzt".contains(c) { spec.append(c); position += 1 }
        guard let c = peek() else { throw error("a format specifier is cut off", at: start, found: "\"%\"") }
        position += 1
        spec.append(c)
        let accepted: Set<String> = ["@", "K", "d", "i", "u", "x", "X", "o", "ld", "li", "lu", "lx", "lld", "lli", "llu", "llx",
                                     "hd", "hi", "hu", "qd", "qi", "qu", "zd", "zu", "f", "lf", "Lf", "e", "g", "s", "c"]
        guard accepted.contains(spec) else {
            throw error("\"%\(spec)\" is not a format specifier (use %@, %K, %d, %i, %ld, %lld, %u, %f, %lf or %s; %K is upper-case)",
                        at: start, found: "\"%\(spec)\"")
        }
        return spec
    }

    private mutating func readNumber() throws(PredicateSyntaxError) -> PredicateToken.Kind {
        let start = position
        if peek() == "0", let radixMark = peek(1)?.lowercased(), ["x", "o", "b"].contains(radixMark) {
            position += 2
            let radix = radixMark == "x" ? 16 : radixMark == "o" ? 8 : 2
            let digitsStart = position
            while let c = peek(), c.isHexDigit || c == "_" { position += 1 }
            let digits = String(characters[digitsStart..<position]).replacingOccurrences(of: "_", with: "")
            guard let value = Int64(digits, radix: radix) else {
                throw error("\"\(String(characters[start..<position]))\" is not a valid base-\(radix) number", at: start,
                            found: "\"\(String(characters[start..<position]))\"")
            }
            return .integer(value)
        }
        var isFloat = false
        while let c = peek(), c.isASCII && c.isNumber { position += 1 }
        if peek() == ".", let d = peek(1), d.isASCII && d.isNumber {
            isFloat = true
            position += 1
            while let c = peek(), c.isASCII && c.isNumber { position += 1 }
        } else if peek() == ".", position == start {
            position += 1
            isFloat = true
            while let c = peek(), c.isASCII && c.isNumber { position += 1 }
        }
        if let e = peek(), e == "e" || e == "E" {
            let sign = peek(1) == "+" || peek(1) == "-" ? 1 : 0
            if let d = peek(1 + sign), d.isASCII && d.isNumber {
                isFloat = true
                position += 1 + sign
                while let c = peek(), c.isASCII && c.isNumber { position += 1 }
            }
        }
        let literal = String(characters[start..<position])
        if let c = peek(), isIdentifierStart(c) {
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
            throw error("an escape needs \(hexDigits) hexadecimal digits", at: offset, found: "\"\\\(String(characters[offset + 1..<position]))\"")
        }
        return Character(scalar)
    }
}

/// A predicate that could not be parsed: where, what was found there, and what was expected.
public struct PredicateSyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The text that was parsed.
    public let text: String
    /// The offset of the problem, in characters from the start of the text.
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
        for character in text.prefix(offset) {
            if character == "\n" { line += 1; column = 1 } else { column += 1 }
        }
        self.line = line
        self.column = column
    }

    /// "at offset 12 (line 1, column 13), found "foo": expected …".
    public var description: String {
        "cannot parse the predicate at offset \(offset) (line \(line), column \(column)), found \(found): \(message)"
    }
}
