//! Strings the reviews of the screen found passing or blocked wrongly, kept as they were reported:
//! identifiers (titled names in every case, NHS and record numbers, spaced dates and numbers) and
//! clinical queries (dose ladders, cut-offs, scores with a year, abbreviations after a title).

use super::*;

#[test]
fn review_leaks_are_blocked() {
    for leak in [
        // An upper-case title, a period and a capitalised name: a sentence end only after MS, MR
        // or MX, and only before a word that is not a common one (surnames mostly are).
        "MR. Smith",
        "MRS. Jones asthma",
        "MS. Lee",
        "DR. Patel referral",
        "PROF. Müller",
        "FRAU. Schmidt",
        // Mx before a capitalised word that is not medical.
        "Mx Smith",
        "Mx Jordan Taylor",
        // Record numbers, spelled-out titles, upper-case names after "patient".
        "hospital number 1234567",
        "MRN12345678",
        "patient SMITH",
        "Doctor Patel",
        "Mister Smith",
        // A date with spaces, an international number with 00, French pairs, an SSN with dots.
        "04 03 1961",
        "0049 30 12345678",
        "06 12 34 56 78",
        "123.45.6789",
        // Three numbers with spaces and no unit, or with brackets before a unit, are still a number.
        "555 123 4567 asthma",
        "(555) 123 4567 mg",
    ] {
        assert!(has_identifier(leak), "{leak}");
    }
}

#[test]
fn review_clinical_queries_pass() {
    for clean in [
        // Dose ladders and cut-offs: three numbers with spaces before a unit or ending in a year.
        "metformin 500 850 1000 mg",
        "levetiracetam 250 500 1000 mg bid",
        "gabapentin 300 600 900 1200 mg",
        "NT-proBNP 450 900 1800 pg/mL age cut-offs",
        "vancomycin AUC 400 600 2020 guideline",
        // Words that start like a month.
        "SOFA 2 sepsis 2016 definition",
        "hour 1 sepsis 2018 bundle",
        "phase 3 novel 2020 anticoagulant",
        "CKD 4 decompensated 2019",
        // Upper-case words after "patient" that are medical; spelled-out titles before medical words.
        "patient HIV status",
        "patient COPD outcomes",
        "Doctor Patient communication",
        "doctor shopping opioids",
        "phase 2 3 2020 trial",
    ] {
        assert!(!has_identifier(clean), "{clean}");
    }
}

#[test]
fn round3_leaks_are_blocked() {
    for leak in [
        // Valid NHS numbers whose last group reads as a year; a number word before a ladder.
        "NHS number 943 476 2014",
        "NHS no 485 777 2019",
        "NHS number 943 476 1999",
        "943 476 2014",
        "phone 500 850 1000",
        "call 212 300 1000 mg",
        // Names with inner capitals, particles, apostrophes and hyphens.
        "Mx McDonald",
        "Mx O'Brien asthma",
        "Mx MacLeod",
        "Mx Smith-Jones",
        "Dr de Silva",
        "Mr van der Berg",
        "Frau von Braun",
        "miss Smith",
        "miss. Smith",
        "miss J. Smith",
        "patient O'Brien",
        "patient D'Souza",
        "patient Smith's asthma",
        "Mx Bell's palsy",
        "Mx O’Brien’s",
        "MR. Smith-Jones",
        "MS. Taylor-Brown",
        "HERR Smith",
        "HERR Müller",
        "FRAU Schmidt",
        "PROF Müller",
        // Record numbers and dates.
        "unit number 1234567",
        "accession number 12345678",
        "Patienten-ID 12345678",
        "KVNR A123456789",
        "Versichertennummer A123456789",
        "Mar-04-1961",
        "1961 03 04",
        "04 10 2021",
        "call 123 45 6789 mg",
    ] {
        assert!(has_identifier(leak), "{leak}");
    }
}

#[test]
fn round3_clinical_queries_pass() {
    for clean in [
        // Ladders without a unit, units added, and the spaced SSN's unit check.
        "metformin 500 850 1000",
        "gabapentin 300 600 900 1200",
        "NT-proBNP 450 900 1800",
        "ALT 100 200 1000 U/L",
        "viral load 200 400 1000 copies/mL",
        "CD4 350 500 1000 cells",
        "vancomycin 500 750 1000 milligrams",
        "vitamin D 800 20 1000 IU",
        "EPO 150 40 1000 units",
        // Cut-offs and a guideline's year in this century are no spaced date.
        "hyponatremia 10 12 2014 guideline",
        "ASCVD 10 20 2018 guideline",
        "SCORE2 thresholds 10 20 2021",
        "AUDIT-C 10 12 2019",
        // Non-name words after "patient"; particles and "miss" before lower-case words.
        "Patient Health Questionnaire PHQ-9",
        "Patient Global Impression of Change",
        "Patient Activation Measure",
        "patient NICE guideline",
        "patient WHO classification",
        "pt HIGH risk",
        "Pt Hb 70",
        "patient HbA1c target",
        "patient GP registration",
        "CD4 cell count 350 500 1000",
        "NHS guideline metformin 500 850 1000",
        "patient HER2 status",
        "miss rate",
        "Dr de novo mutation",
        "Mx HFpEF",
    ] {
        assert!(!has_identifier(clean), "{clean}");
    }
}
