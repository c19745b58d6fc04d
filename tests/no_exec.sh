#!/bin/sh
# The library never re-executes a process or starts a program (tg_blas.h): no
# exec*, system, popen or posix_spawn among libtapegrad's undefined symbols.
# The kit's program start (tg_runtime.h) does re-execute, and the same scan
# must find its execv: the scan can fail.
# usage: no_exec.sh LIBTAPEGRAD LIBTAPEGRAD_TRAIN
set -u
lib=$1 kit=$2
calls='^(execv|execve|execvp|execvpe|execl|execle|execlp|fexecve|system|popen|posix_spawn|posix_spawnp)(@.*)?$'
found=$(nm -u "$lib" | awk '{print $NF}' | grep -E "$calls" | sort -u)
if [ -n "$found" ]; then
    echo "FAIL: $lib calls $(echo $found): the library must not start or re-execute a program"
    exit 1
fi
kitcalls=$(nm -u "$kit" | awk '{print $NF}' | grep -E "$calls" | sort -u)
case " $(echo $kitcalls) " in
*" execv"*) ;;
*) echo "FAIL: the scan found no execv in $kit (the program start's restart): it cannot see such calls"; exit 1 ;;
esac
echo "ok: $lib calls none of exec*/system/popen/posix_spawn; the kit's start calls $(echo $kitcalls)"
