//! Issuing the pieces of one request to members concurrently. Shared by every engine that
//! splits requests without transforming the data (stripe, concat).

use flashrig_blockdev::{
    DevError, DevRef, DevResult, ScrubReport, VendorCommand, VendorReply, WriteHints,
};
use futures_util::future::try_join_all;

use crate::layout::Piece;

pub(crate) async fn read(
    members: &[DevRef],
    pieces: &[Piece],
    bs: usize,
    mdb: usize,
    mut buf: &mut [u8],
    mut md: Option<&mut [u8]>,
) -> DevResult<()> {
    let mut futs = Vec::with_capacity(pieces.len());
    for p in pieces {
        let (head, tail) = std::mem::take(&mut buf).split_at_mut(p.blocks as usize * bs);
        buf = tail;
        let md_piece = match md.take() {
            Some(m) => {
                let (h, t) = m.split_at_mut(p.blocks as usize * mdb);
                md = Some(t);
                Some(h)
            }
            None => None,
        };
        futs.push(members[p.member].read(p.member_lba, head, md_piece));
    }
    try_join_all(futs).await.map(|_| ())
}

pub(crate) async fn write(
    members: &[DevRef],
    pieces: &[Piece],
    bs: usize,
    mdb: usize,
    data: &[u8],
    md: Option<&[u8]>,
    hints: WriteHints,
) -> DevResult<()> {
    let futs = pieces.iter().map(|p| {
        let off = p.offset_blocks as usize;
        let n = p.blocks as usize;
        let md_piece = md.map(|m| &m[off * mdb..(off + n) * mdb]);
        members[p.member].write(p.member_lba, &data[off * bs..(off + n) * bs], md_piece, hints)
    });
    try_join_all(futs).await.map(|_| ())
}

pub(crate) async fn trim(members: &[DevRef], pieces: &[Piece]) -> DevResult<()> {
    try_join_all(pieces.iter().map(|p| members[p.member].trim(p.member_lba, p.blocks)))
        .await
        .map(|_| ())
}

pub(crate) async fn flush(members: &[DevRef]) -> DevResult<()> {
    try_join_all(members.iter().map(|m| m.flush())).await.map(|_| ())
}

/// Forwards a vendor command that concerns every member as a whole (a scrub) to each in
/// turn and sums their reports: a layer without redundancy has nothing of its own to verify.
/// Members that do not support it are skipped; if none does, the command is unsupported.
pub(crate) async fn scrub(members: &[DevRef]) -> DevResult<VendorReply> {
    let mut total = ScrubReport::default();
    let mut any = false;
    for m in members {
        match m.vendor(VendorCommand::Scrub).await {
            Ok(VendorReply::Scrubbed(r)) => {
                total.add(&r);
                any = true;
            }
            Ok(_) => {}
            Err(DevError::Unsupported { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    match any {
        true => Ok(VendorReply::Scrubbed(total)),
        false => Err(DevError::Unsupported { command: "scrub" }),
    }
}
