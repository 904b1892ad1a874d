# fifo, lifo and priority order with one worker and one slot.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
handler h.sh 'cat >> "'"$T"'/order"; echo >> "'"$T"'/order"'
"$TQ" queue f --order fifo >/dev/null
"$TQ" queue l --order lifo >/dev/null
for q in f l; do
    "$TQ" enqueue --queue $q a >/dev/null
    "$TQ" enqueue --queue $q b >/dev/null
    "$TQ" enqueue --queue $q --priority 5 urgent >/dev/null
    "$TQ" enqueue --queue $q --priority -1 whenever >/dev/null
    "$TQ" enqueue --queue $q c >/dev/null
done
"$TQ" work --queue f --drain --quiet -- "$T/h.sh"
expect_eq "$(tr '\n' ' ' <"$T/order")" "urgent a b c whenever " fifo
rm "$T/order"
"$TQ" work --queue l --drain --quiet -- "$T/h.sh"
expect_eq "$(tr '\n' ' ' <"$T/order")" "urgent c b a whenever " lifo
echo ok
