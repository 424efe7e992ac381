//! `calculate_medical_score`: the medical calculators of CALCULATORS.md.
