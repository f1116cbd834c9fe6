import Foundation
import ObjectGraph

/// The benchmark's model: departments, employees and projects, with to-one, to-many and many-to-many
/// relationships and four indexes on employees (age, salary, department then salary — a compound index led by a
/// to-one, as an app keeps for "the best paid of this department" —, and age storing salary — a covering index, for
/// "the best paid of an age range"). The SQLite schema mirrors it (the covering index as one on age and salary).
enum BenchModel {
    static let model: ManagedObjectModel = try! ManagedObjectModel {
        EntityDescription("Department") {
            AttributeDescription("name", .string)
            AttributeDescription("budget", .integer64)
            RelationshipDescription("employees", destination: "Employee", inverse: "department", toMany: true)
        }
        EntityDescription("Employee") {
            AttributeDescription("name", .string)
            AttributeDescription("email", .string, isOptional: true)
            AttributeDescription("age", .integer16)
            AttributeDescription("salary", .double)
            AttributeDescription("hired", .date)
            RelationshipDescription("department", destination: "Department", inverse: "employees")
            RelationshipDescription("projects", destination: "Project", inverse: "members", toMany: true)
            FetchIndexDescription("byAge", properties: ["age"])
            FetchIndexDescription("bySalary", properties: ["salary"])
            FetchIndexDescription("byDepartmentSalary", properties: ["department", "salary"])
            FetchIndexDescription("byAgeCoveringSalary", properties: ["age"], storing: ["salary"])
        }
        EntityDescription("Project") {
            AttributeDescription("code", .string)
            RelationshipDescription("members", destination: "Employee", inverse: "projects", toMany: true)
        }
    }

    static let sqliteSchema = """
        CREATE TABLE department(id INTEGER PRIMARY KEY, name TEXT NOT NULL, budget INTEGER NOT NULL);
        CREATE TABLE project(id INTEGER PRIMARY KEY, code TEXT NOT NULL);
        CREATE TABLE employee(id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT, age INTEGER NOT NULL,
                              salary REAL NOT NULL, hired REAL NOT NULL, departmentId INTEGER REFERENCES department(id));
        CREATE INDEX employee_age ON employee(age);
        CREATE INDEX employee_salary ON employee(salary);
        CREATE INDEX employee_department ON employee(departmentId);
        CREATE INDEX employee_department_salary ON employee(departmentId, salary);
        CREATE INDEX employee_age_salary ON employee(age, salary);
        CREATE TABLE employee_project(employeeId INTEGER NOT NULL, projectId INTEGER NOT NULL,
                                      PRIMARY KEY(employeeId, projectId)) WITHOUT ROWID;
        CREATE INDEX employee_project_project ON employee_project(projectId);
        """
}

/// A small deterministic generator, so every system gets the same data from the same seed.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }
}

/// The dataset: sizes derived from the number of employees, and every value a pure function of (seed, index).
struct Dataset {
    /// Changes whenever the generated data or the schema does, so a kept dataset of another version is not reused
    /// (it names the dataset's folder). 2: up to five projects per employee (about 2.5 on average, ~250 000 links at
    /// 100 000 employees; version 1 had up to three, ~150 000) and the index on department and salary. 3: the covering
    /// index on age storing salary (SQLite: on age and salary).
    static let version = 3

    let employees: Int
    let seed: UInt64

    var departments: Int { max(10, employees / 1000) }
    var projects: Int { max(10, employees / 100) }

    struct Employee {
        let name: String
        let email: String?
        let age: Int16
        let salary: Double
        let hired: Date
        let department: Int     // 1-based
        let projects: [Int]     // 1-based
    }

    static let firstNames = ["Ada", "Alan", "Ann", "Barbara", "Brian", "Claude", "Donald", "Edsger", "Frances", "Grace",
                             "Hedy", "Ivan", "John", "Katherine", "Ken", "Leslie", "Margaret", "Niklaus", "Radia", "Tim"]
    static let lastNames = ["Hopper", "Turing", "Liskov", "Knuth", "Dijkstra", "Allen", "Lamarr", "Sutherland", "McCarthy",
                            "Johnson", "Thompson", "Lamport", "Hamilton", "Wirth", "Perlman", "Berners-Lee", "Shannon", "Kernighan"]

    func employee(_ index: Int) -> Employee {
        var random = SeededGenerator(seed: seed ^ UInt64(index) &* 0x2545_F491_4F6C_DD1D)
        let first = Self.firstNames[Int(random.next() % UInt64(Self.firstNames.count))]
        let last = Self.lastNames[Int(random.next() % UInt64(Self.lastNames.count))]
        // Names of varied length; ages skewed young; salaries skewed (log-normal-ish); a tenth without email.
        let name = "\(first) \(last) \(index)" + String(repeating: "x", count: Int(random.next() % 24))
        let email: String? = random.next() % 10 == 0 ? nil : "\(first.lowercased()).\(index)@example.com"
        let age = Int16(18 + Int(pow(random.unit(), 2) * 50))
        let salary = (30_000 * exp(random.unit() * 1.6)).rounded() + Double(index % 100) / 100
        let hired = Date(timeIntervalSinceReferenceDate: 300_000_000 + random.unit() * 500_000_000)
        let department = 1 + Int(pow(random.unit(), 1.5) * Double(departments)) % departments
        var projects: [Int] = []
        for _ in 0..<Int(random.next() % 6) {
            let project = 1 + Int(random.next() % UInt64(projects.count + self.projects)) % self.projects
            if !projects.contains(project) { projects.append(project) }
        }
        return Employee(name: name, email: email, age: age, salary: salary, hired: hired, department: department, projects: projects.sorted())
    }
}

/// Parses sizes like `10k`, `1m`, `100000`.
func parseSize(_ text: String) -> Int? {
    let lower = text.lowercased().replacingOccurrences(of: "_", with: "")
    if let value = Int(lower) { return value }
    let multipliers: [Character: Double] = ["k": 1_000, "m": 1_000_000]
    guard let last = lower.last, let multiplier = multipliers[last], let number = Double(lower.dropLast()) else { return nil }
    return Int(number * multiplier)
}
