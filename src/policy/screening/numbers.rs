//! Three numbers written with spaces: a North American phone number (3-3-4), a US social security
//! number (3-2-4) or a UK NHS number (3-3-4), or a dose ladder, cut-offs and a guideline's year
//! ("metformin 500 850 1000", "CD4 350 500 1000 cells", "AUC 400 600 2020 guideline"). Nothing in
//! the digits alone tells them apart, so the words around them decide (rules in docs/phi.md).

use std::sync::LazyLock;

use regex::Regex;

/// North American phone numbers, 3-3-4 ("555-123-4567", "(555) 123-4567", "555 123 4567"); with
/// spaces only, [`north_american_phone`] tells them from doses and cut-offs.
pub(super) static NORTH_AMERICAN_PHONE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?:\+?1[\s.-]?)?(?:\([0-9]{3}\)|\b[0-9]{3})[\s.-]?[0-9]{3}[\s.-][0-9]{4}\b").ok()
});

/// A US social security number with spaces and without the word, only when the area is one the
/// SSA issues (not 000, 666 or 9xx), the group is not 00 and the last group cannot be a year (19xx,
/// 20xx: "BP 140 90 2017" is a blood pressure and a year); [`spaced_ssn`] then tells it from doses.
pub(super) static SPACED_SSN: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"\b(?:00[1-9]|0[1-9][0-9]|[1-578][0-9]{2}|6[0-57-9][0-9]|66[0-57-9]) (?:0[1-9]|[1-9][0-9]) (?:[03-9][0-9]{3}|1[0-8][0-9]{2}|2[1-9][0-9]{2})\b").ok()
});

/// A unit right after three numbers: a dose ladder or lab cut-offs ("500 850 1000 mg", "450 900
/// 1800 pg/mL", "100 200 1000 U/L", "200 400 1000 copies/mL"), not a phone number.
pub(super) static UNIT_AFTER: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(?:mg|mcg|µg|μg|ug|ng|pg|g|kg|ml|mls|dl|l|mmol|µmol|μmol|umol|nmol|pmol|meq|iu|u|units?|mmhg|cells|copies|kcal|milligrams?|micrograms?|grams?)\b").ok()
});

/// A word right before the number that says it is a phone, social security or NHS number: then no
/// unit, year or ladder makes it a dose ("phone 500 850 1000", "NHS no: 485 777 2019", "call on
/// 212 300 1000"). Only a "number", "no" or "on" may come between, so "NHS metformin guideline 500
/// 850 1000" is still a ladder; not "cell" ("CD4 cell count 350 500 1000").
pub(super) static NUMBER_WORD_BEFORE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:phone|telephone|tel|call|mobile|fax|nhs|ssn|social\s+security)\b(?:\s*(?:number|no|nr|\#)\b)?(?:\s*(?:is|on|at)\b)?[\s:.\#-]*$").ok()
});

/// A 3-3-4 phone number. Three numbers written with spaces only are a dose ladder or cut-offs
/// when a unit follows ("metformin 500 850 1000 mg"), when they climb in round steps
/// ([`ladder`]: "gabapentin 300 600 900 1200") or when the last reads as a year ("AUC 400 600
/// 2020 guideline") — unless a phone or NHS word comes shortly before, and a year not when the ten
/// digits are a valid NHS number ("943 476 2014"). With brackets, dots, dashes or "+1" they are
/// always a number.
pub(super) fn north_american_phone(text: &str) -> bool {
    let (Some(pattern), Some(unit)) = (NORTH_AMERICAN_PHONE.as_ref(), UNIT_AFTER.as_ref()) else { return true };
    let mut from = 0;
    while let Some(found) = pattern.find_at(text, from) {
        let number = found.as_str();
        let spaced = number.chars().all(|c| c.is_ascii_digit() || c.is_whitespace());
        let year = number.len() >= 4
            && matches!(&number[number.len() - 4..number.len() - 2], "19" | "20")
            && !nhs_number(number);
        let dose = year || unit.is_match(&text[found.end()..]) || ladder(number);
        if !spaced || !dose || word_before(text, found.start()) {
            return true;
        }
        // Look again from the next digit: "300 600 900 1200 mg" is read as "600 900 1200" too.
        from = found.start() + 1;
    }
    false
}

/// A 3-2-4 social security number with spaces ([`SPACED_SSN`]), unless a unit follows or the
/// numbers climb ("vitamin D 800 20 1000 IU", "EPO 150 40 1000 units") and no number word
/// comes before.
pub(super) fn spaced_ssn(text: &str) -> bool {
    let (Some(pattern), Some(unit)) = (SPACED_SSN.as_ref(), UNIT_AFTER.as_ref()) else { return true };
    let mut from = 0;
    while let Some(found) = pattern.find_at(text, from) {
        let dose = unit.is_match(&text[found.end()..]) || ladder(found.as_str());
        if !dose || word_before(text, found.start()) {
            return true;
        }
        from = found.start() + 1;
    }
    false
}

/// Does a phone, NHS or social security word come shortly before `start`?
fn word_before(text: &str, start: usize) -> bool {
    NUMBER_WORD_BEFORE.as_ref().is_none_or(|word| word.is_match(&text[..start]))
}

/// Three groups that climb in round steps, as doses and cut-offs are written: each larger than the
/// one before, the first two multiples of 10 and the last of 100 ("500 850 1000", "180 540
/// 1000"). Phone numbers seldom look like this ("212 555 1234" does not).
fn ladder(number: &str) -> bool {
    let groups: Vec<u32> = number.split_whitespace().filter_map(|g| g.parse().ok()).collect();
    match groups[..] {
        [a, b, c] => a < b && b < c && a % 10 == 0 && b % 10 == 0 && c % 100 == 0,
        _ => false,
    }
}

/// Do the last ten digits pass the NHS number check (modulus 11, weights 10 to 2)?
fn nhs_number(number: &str) -> bool {
    let digits: Vec<u32> = number.chars().filter_map(|c| c.to_digit(10)).collect();
    let Some(digits) = digits.len().checked_sub(10).map(|skip| &digits[skip..]) else { return false };
    let sum: u32 = digits[..9].iter().zip((2..=10).rev()).map(|(d, w)| d * w).sum();
    let check = (11 - sum % 11) % 11;
    check != 10 && check == digits[9]
}
