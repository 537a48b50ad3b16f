# Hashes, arrays and strings built, sorted, rewritten and dropped: perl's
# own values on the system allocator. Deterministic output.
use strict;
use warnings;

my %h;
for my $i (1 .. 200_000) {
    $h{"key$i"} = "v" x ($i % 97) . $i;
}
my $total = 0;
$total += length($h{$_}) for keys %h;
print "built ", scalar(keys %h), " keys, $total bytes\n";

# Rewrite half, delete a third: values change size and move.
for my $i (1 .. 200_000) {
    if ($i % 3 == 0) { delete $h{"key$i"} }
    elsif ($i % 2 == 0) { $h{"key$i"} = join(",", ($i) x ($i % 13 + 1)) }
}
my @sorted = sort { length($h{$a}) <=> length($h{$b}) or $a cmp $b } keys %h;
print "kept ", scalar(@sorted), " first $sorted[0] last $sorted[-1]\n";

# Nested structures and a regex pass over a joined string.
my @rows = map { { id => $_, tags => [ map { "t$_" } 1 .. ($_ % 7) ] } } 1 .. 50_000;
my $joined = join("\n", map { "$_->{id}:" . join("|", @{ $_->{tags} }) } @rows);
my $matches = () = $joined =~ /t3\|t4/g;
print "rows ", scalar(@rows), " joined ", length($joined), " matches $matches\n";
