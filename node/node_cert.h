/* node_cert — CURVE certificates of nodes (CZMQ zcert files).
 *
 * Owns:    writing a new key pair (keygen) and reading one back (--cert).
 *          A certificate is two text files in CZMQ's ZPL format: FILE with
 *          the public key and FILE_secret with both keys (mode 0600).
 * Exposes: node_cert_generate, node_cert_load.
 * Callers: node_cmd_keygen.c, node_cmd_node.c (--cert), tests.
 */
#ifndef NODE_CERT_H
#define NODE_CERT_H

#include <stddef.h>
#include <stdint.h>

/* Writes a new key pair to path and path_secret (refused when either
 * exists, unless force) and its Z85 public key (40 chars + NUL) to
 * public_txt.  0, or -1 with a message naming the file. */
int node_cert_generate(const char *path, int force, char public_txt[41], char *err,
                       size_t errlen);

/* Reads the key pair of a certificate: path may be the secret file or the
 * public one with path_secret next to it.  0, or -1 with a message (missing
 * or unreadable file, no secret key in it, a secret key file accessible by
 * group or others: mode & 077, as ssh refuses; the message says chmod 600). */
int node_cert_load(const char *path, uint8_t public_key[32], uint8_t secret_key[32], char *err,
                   size_t errlen);

#endif
