"""Small algorithms every stage uses: numpy set operations off numpy.ma, connected groups
(union-find), and the nesting of spans."""
