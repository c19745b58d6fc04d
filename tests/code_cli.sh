#!/bin/bash
# attn_scale --task code, end to end at a tiny size, on corpora made here:
# - a file, a folder (recursively, in path order) and an @LIST give the same
#   corpus when they name the same files: the same SHA-256 and log rows;
# - the log names the corpus (files, bytes, SHA-256), logs val_loss every
#   --eval-every steps and nan in between;
# - bad input exits 2 with the path and the problem, no log or checkpoint
#   written: a missing path, an empty file, a folder with no files, a corpus
#   shorter than a window + 1 in each part, a @LIST naming itself, --vocab 100,
#   --data without --task code, --sample without --resume;
# - a binary file is allowed and its non-text bytes are counted;
# - resuming on another corpus is refused; a resumed run's rows are a straight run's;
# - --dump-attn works (its probe: the first validation window);
# - --sample is deterministic for a seed and writes after the prompt.
set -u
bin=$1
. "$(dirname "$0")/cli_util.sh"
T="--task code --seq-len 16 --batch 4 --d-model 16 --heads 2 --d-head 8 --log-every 5 --eval-every 10 --warmup 2"
mkdir -p src/a src/b empty
for i in 1 2 3; do seq 1 400 | sed "s/^/line $i: int x_/" >"src/a/f$i.h"; done
printf 'struct s { int a; };\n%.0s' $(seq 1 200) >src/b/g.h
cat src/a/f1.h src/a/f2.h src/a/f3.h src/b/g.h >all.txt
printf 'src/a\nsrc/b/g.h\n' >list.txt
hdr() { sed -n "s/^# $2=//p" "$1"; }
run 0 folder $T --steps 20 --data src --log folder.tsv
run 0 file $T --steps 20 --data all.txt --log file.tsv
run 0 list $T --steps 20 --data @list.txt --log list.tsv
[ "$(hdr folder.tsv corpus_sha256)" = "$(sha256sum all.txt | cut -d' ' -f1)" ] || no "folder: corpus_sha256 is not that of the files in path order"
[ "$(hdr folder.tsv corpus_files)" = 4 ] && [ "$(hdr file.tsv corpus_files)" = 1 ] || no "corpus_files wrong"
[ "$(hdr list.tsv corpus_sha256)" = "$(hdr file.tsv corpus_sha256)" ] || no "@LIST: another corpus than the file"
[ "$(rows folder.tsv)" = "$(rows file.tsv)" ] || no "the same bytes from a folder and a file: rows differ"
[ "$(hdr folder.tsv vocab)" = 256 ] || no "vocab is not 256"
vals=$(awk -F'\t' '!/^#/ && !n++ { for (i = 1; i <= NF; i++) if ($i == "val_loss") c = i; next } !/^#/ { print $1 ":" $c }' folder.tsv | tr '\n' ' ')
[[ "$vals" =~ ^0:[0-9.]+\ 5:nan\ 10:[0-9.]+\ 15:nan\ 20:[0-9.]+\ $ ]] || no "val_loss not every 10 steps: $vals"
# bad input: exit 2, the path named, nothing written
: >empty.h; printf 'x' >tiny.txt; echo "@list2.txt" >list2.txt; echo "$PWD/self.txt" >self.txt
badcode() {   # badcode NAME MESSAGE FLAGS...
    local name=$1 msg=$2; shift 2
    run 2 "$name" $T --steps 10 "$@" --log "$name.tsv" --save "$name.st"
    grep -q -- "$msg" "$name.err" || { no "$name: message lacks '$msg'"; sed 's/^/  | /' "$name.err" | head -3; }
    [ ! -e "$name.tsv" ] && [ ! -e "$name.st" ] || no "$name: a file was written"
}
badcode missing "corpus nosuch: No such file" --data nosuch
badcode emptyfile "corpus empty.h: the file is empty" --data empty.h
badcode emptydir "corpus empty: a folder with no files" --data empty
badcode short "with --seq-len 16 it needs at least 170" --data tiny.txt
badcode selflist "the list names itself" --data @self.txt
badcode nested "a list inside a list" --data @list2.txt
badcode vocab "--vocab 100 is refused" --data all.txt --vocab 100
run 2 notcode --steps 10 --data all.txt
grep -q -- "--data needs --task code" notcode.err || no "--data without --task code: not refused"
run 2 samplenores $T --data all.txt --sample "x"
grep -q -- "--sample needs --resume" samplenores.err || no "--sample without --resume: not refused"
# a binary file: allowed, its non-text bytes counted
head -c 4000 /dev/urandom >bin.dat 2>/dev/null || dd if=/dev/zero of=bin.dat bs=1 count=4000 2>/dev/null
run 0 binary $T --steps 5 --data bin.dat --log binary.tsv
grep -q "bytes that are not text" binary.err || no "binary: no note about non-text bytes"
[ "$(hdr binary.tsv corpus_non_text_bytes)" -gt 0 ] || no "binary: corpus_non_text_bytes not counted"
# resume: same corpus straight, other corpus refused
run 0 straight $T --steps 20 --data all.txt --log straight.tsv
run 0 part $T --steps 20 --data all.txt --log part.tsv --save part.st --stop-at 10
run 2 othercorpus $T --steps 20 --data src/a --log part.tsv --save part.st --resume part.st
grep -q "setting differs: corpus_sha256" othercorpus.err || no "resume on another corpus: not refused by its hash"
run 0 resumed $T --steps 20 --data all.txt --log part.tsv --save part.st --resume part.st
[ "$(rows part.tsv)" = "$(rows straight.tsv)" ] || no "a resumed code run's rows differ from a straight run's"
# attention maps: the probe is the first validation window
run 0 dump $T --steps 10 --data all.txt --log dump.tsv --dump-attn 0,10 --dump-attn-file maps.st
[ -s maps.st ] || no "--dump-attn with --task code wrote no maps"
# --sample
run 0 s1 $T --steps 20 --data all.txt --resume part.st --sample "line 2: int" --sample-len 40
run 0 s2 $T --steps 20 --data all.txt --resume part.st --sample "line 2: int" --sample-len 40
cmp -s s1.out s2.out || no "--sample: two draws with one seed differ"
grep -q "^line 2: int" s1.out || no "--sample: the output does not start with the prompt"
[ "$(head -c 51 s1.out | wc -c)" -eq 51 ] || no "--sample: fewer than prompt + 40 bytes"
echo "code_cli: $fails failures"
[ "$fails" -eq 0 ]
