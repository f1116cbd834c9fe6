extension ManagedObjectModel.Slot {
    /// The rules of this attribute that `value` (a value of its type) breaks, each told to `fail` as a sentence
    /// about the value: NaN, the minimum and maximum value, length and pattern. A save and a batch insert check the
    /// same rules with it.
    func ruleFailures(of value: AttributeValue, _ fail: (String) -> Void) {
        if value.isNaN { fail("NaN is not a \(value.kindName): it is not equal to itself") }
        guard hasRules, let attribute else { return }
        let rules = attribute.validation
        if let minimum = rules.minimumValue?.numericValue, let number = value.numericValue, number < minimum {
            fail("\(value) is below the minimum \(rules.minimumValue!)")
        }
        if let maximum = rules.maximumValue?.numericValue, let number = value.numericValue, number > maximum {
            fail("\(value) is above the maximum \(rules.maximumValue!)")
        }
        // Counting characters walks the whole string: only when a rule needs the length.
        var length: Int?
        if rules.minimumLength != nil || rules.maximumLength != nil {
            switch value {
            case .string(let text): length = text.count
            case .data(let data) where attribute.type == .binaryData: length = data.count
            default: break
            }
        }
        if let length, let minimum = rules.minimumLength, length < minimum {
            fail("is \(length) long, shorter than the minimum length \(minimum)")
        }
        if let length, let maximum = rules.maximumLength, length > maximum {
            fail("is \(length) long, longer than the maximum length \(maximum)")
        }
        if let pattern = rules.pattern, case .string(let text) = value, StringMatching.matches(text, pattern, options: []) != true {
            fail("\"\(text)\" does not match the pattern \(pattern)")
        }
    }
}
