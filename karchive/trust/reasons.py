"""The reasons a trust policy refuses an archive or ignores a signature: one stable code each.

Codes are part of the interface (``UntrustedArchiveError.reason``, ``karchive verify --json``), so
they never change meaning; spec/SIGNING.md §7 lists them. ``STAGE`` orders the per-signature codes
by how far a signature got through verification (§6): when nothing counts, the archive is refused
with the reason of the signature that got furthest, since it says the most about what is wrong.
"""

from __future__ import annotations

UNSIGNED = "unsigned"  # no signature at all (no sidecar, or an empty one)
NO_RULE = "no-rule"  # the policy has no rule for this archive name
THRESHOLD_NOT_MET = "threshold-not-met"  # some signatures count, fewer than the rule needs

MALFORMED_ENVELOPE = "malformed-envelope"  # the sidecar is not a DSSE envelope we can read
UNKNOWN_KEY = "unknown-key"  # no key in the policy verifies the signature
BAD_SIGNATURE = "bad-signature"  # the named key does not verify it: envelope altered
WRONG_PAYLOAD_TYPE = "wrong-payload-type"  # validly signed, but not an in-toto statement
MALFORMED_STATEMENT = "malformed-statement"  # validly signed, but not a karchive provenance statement
SWAPPED_ENVELOPE = "swapped-envelope"  # validly signed statement about another archive (name/version)
DIGEST_MISMATCH = "digest-mismatch"  # validly signed statement about other bytes of this archive
REVOKED_KEY = "revoked-key"  # signed by a key the policy revokes
KEY_NOT_YET_VALID = "key-not-yet-valid"  # before the key's rotation window opens
KEY_EXPIRED = "key-expired"  # after the key's rotation window closed
KEY_NOT_ALLOWED = "key-not-allowed"  # a known key, but not one the rule lets sign this name

# Errors before or around verification (the first three are the class defaults in karchive/errors.py).
BAD_POLICY = "bad-policy"  # TrustPolicyError: the policy file is invalid
BAD_KEY_FILE = "bad-key-file"  # KeyFileError: a key file cannot be used
BAD_BUILD_INFO = "bad-build-info"  # build info is invalid or contradicts the manifest
STATEMENT_CONFLICT = "statement-conflict"  # sign: the sidecar already holds another statement
DAMAGED_ARCHIVE = "damaged-archive"  # the archive's own name/version cannot be read
MISSING_DEPENDENCY = "missing-dependency"  # the cryptography package is not installed

# Refusals by the loader around verification (spec/SIGNING.md §9, REGISTRY.md §6-§7).
DOWNGRADE = "downgrade"  # NAME@latest resolved below a version this cache verified
PINNED_SIGNER_MISSING = "pinned-signer-missing"  # a lockfile pins a signer whose signature does not count now
POLICY_REQUIRED = "policy-required"  # a lockfile pins signers, but no trust policy was given

# Signed registry metadata (spec/SIGNING.md §11; RegistryMetadataError).
METADATA_MISSING = "metadata-missing"  # the policy requires registry metadata; the registry has none
METADATA_MALFORMED = "metadata-malformed"  # a snapshot/timestamp is not a document of §11.2
METADATA_SIGNATURE = "metadata-signature"  # bad, untrusted or too few signatures on a snapshot/timestamp
METADATA_EXPIRED = "metadata-expired"  # the snapshot or timestamp is past its expiry (freeze)
METADATA_ROLLBACK = "metadata-rollback"  # older snapshot/timestamp than this cache already verified
METADATA_MISMATCH = "metadata-mismatch"  # the timestamp's snapshot digest, or a record's digests, differ
VERSION_NOT_IN_SNAPSHOT = "version-not-in-snapshot"  # the registry serves a version the snapshot lacks
VERSION_WITHHELD = "version-withheld"  # the snapshot lists a version the registry does not serve

#: Per-signature codes in the order verification reaches them (spec/SIGNING.md §6).
STAGE = {
    MALFORMED_ENVELOPE: 0,
    UNKNOWN_KEY: 1,
    BAD_SIGNATURE: 2,
    WRONG_PAYLOAD_TYPE: 3,
    MALFORMED_STATEMENT: 4,
    SWAPPED_ENVELOPE: 5,
    DIGEST_MISMATCH: 6,
    REVOKED_KEY: 7,
    KEY_NOT_YET_VALID: 8,
    KEY_EXPIRED: 8,
    KEY_NOT_ALLOWED: 9,
}

#: What each code means, for people (CLI output, error messages).
MEANING = {
    UNSIGNED: "the archive has no signature",
    NO_RULE: "no rule of the trust policy covers this archive name",
    THRESHOLD_NOT_MET: "fewer distinct trusted signers than the policy requires",
    MALFORMED_ENVELOPE: "the signature file is not a valid DSSE envelope",
    UNKNOWN_KEY: "signed by a key the trust policy does not list",
    BAD_SIGNATURE: "the signature does not verify (the envelope was altered)",
    WRONG_PAYLOAD_TYPE: "the signed payload is not an in-toto statement",
    MALFORMED_STATEMENT: "the signed payload is not a karchive provenance statement",
    SWAPPED_ENVELOPE: "the signature is for another archive",
    DIGEST_MISMATCH: "the signature does not cover these bytes (the archive changed after signing)",
    REVOKED_KEY: "signed by a revoked key",
    KEY_NOT_YET_VALID: "signed by a key whose validity window has not started",
    KEY_EXPIRED: "signed by a key whose validity window has ended (key rotation)",
    KEY_NOT_ALLOWED: "signed by a key the policy does not allow for this archive name",
    BAD_POLICY: "the trust policy is invalid",
    BAD_KEY_FILE: "a key file cannot be used",
    BAD_BUILD_INFO: "the build info is invalid or contradicts the archive",
    STATEMENT_CONFLICT: "the signature file already holds a different statement for this archive",
    DAMAGED_ARCHIVE: "the archive cannot be read",
    MISSING_DEPENDENCY: "the cryptography package is not installed (pip install 'karchive[trust]')",
    DOWNGRADE: "the newest version is older than one this cache already verified (possible rollback)",
    PINNED_SIGNER_MISSING: "a signer the lockfile pins does not sign this archive validly now",
    POLICY_REQUIRED: "the lockfile pins signers; checking them needs a trust policy",
    METADATA_MISSING: "the trust policy requires signed registry metadata and the registry has none",
    METADATA_MALFORMED: "the registry metadata is not a valid snapshot or timestamp",
    METADATA_SIGNATURE: "the registry metadata is not signed by enough trusted keys",
    METADATA_EXPIRED: "the registry metadata has expired (the registry may be frozen)",
    METADATA_ROLLBACK: "the registry metadata is older than metadata this cache already verified (rollback)",
    METADATA_MISMATCH: "the registry's contents differ from what its signed metadata says",
    VERSION_NOT_IN_SNAPSHOT: "the version is not in the registry's signed snapshot",
    VERSION_WITHHELD: "the registry's signed snapshot lists a version the registry does not serve (withheld)",
}
