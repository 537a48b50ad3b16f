#!/bin/sh
# Git operations on a throwaway repository in the current directory; prints
# what they report. Run twice (with and without smalloc) in two empty
# directories: the output must be identical.
set -eu
export GIT_AUTHOR_NAME=Test GIT_AUTHOR_EMAIL=test@example.com
export GIT_COMMITTER_NAME=Test GIT_COMMITTER_EMAIL=test@example.com
export GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME="$PWD"

git init -q -b main repo
cd repo
i=0
while [ $i -lt 300 ]; do
    mkdir -p "dir$((i % 10))"
    seq $i $((i * 7 + 50)) > "dir$((i % 10))/file$i.txt"
    i=$((i + 1))
done
git add .
git commit -q -m "initial: 300 files"
git checkout -q -b feature
for f in dir1/*.txt; do seq 5 2 400 >> "$f"; done
git mv dir2 moved2
git commit -q -am "feature: append and move"
git checkout -q main
for f in dir3/*.txt; do sed -i 's/^1/one/' "$f"; done
git commit -q -am "main: rewrite"
git merge -q --no-edit feature
git log --stat --format='%H %s' | head -200
git diff --stat HEAD~2 HEAD
git grep -c '^one' | head -20
git gc -q
git fsck --full
git count-objects -v | grep -v size
git rev-parse HEAD 'HEAD^{tree}'
