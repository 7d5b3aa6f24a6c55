/* node_cmds — the `lpgossip` subcommands, one function each.
 * Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand), prints its own --help, and returns the process exit code:
 * 0 success, 1 runtime failure, 2 bad usage or invalid input file.
 * Callers: node_main.c (dispatch table). */
#ifndef NODE_CMDS_H
#define NODE_CMDS_H

int node_cmd_train(int argc, char **argv);
int node_cmd_eval(int argc, char **argv);
int node_cmd_predict(int argc, char **argv);
int node_cmd_topology(int argc, char **argv);
int node_cmd_simulate(int argc, char **argv);
int node_cmd_node(int argc, char **argv);
int node_cmd_keygen(int argc, char **argv);
int node_cmd_version(int argc, char **argv);
int node_cmd_watch(int argc, char **argv);

#endif
